"""A small OpenAI-compatible HTTP server for a local Qwen2.5-VL folder (``airplay vln serve``).

For users without vLLM and for the tests of the ``openai`` backend: the same requests vLLM
answers, served by :class:`airplay.vln.backends.TransformersBackend` on 127.0.0.1.

* ``GET /v1/models`` -> ``{"object": "list", "data": [{"id": NAME, "object": "model", ...}]}``
* ``POST /v1/chat/completions`` with ``model``, ``messages`` (``content`` a string or a list of
  ``{"type": "text", "text"}`` and ``{"type": "image_url", "image_url": {"url": "data:image/...;base64,..."}}``
  parts), optional ``max_tokens`` / ``max_completion_tokens`` and ``temperature`` (0 or absent:
  greedy) -> a ``chat.completion`` object with one choice and token usage.
* ``GET /health`` -> 200.

Only data-URL images are accepted (the server fetches nothing). Bad requests get HTTP 400 with
``{"error": {"message", "type"}}`` naming the field. One generation runs at a time.
"""

from __future__ import annotations

import base64
import io
import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY_BYTES = 64 * 1024 * 1024


class RequestError(ValueError):
    """A malformed request; ``field`` names what is wrong."""


def _decode_image(url: str, where: str):
    from PIL import Image

    if not isinstance(url, str) or not url.startswith("data:image/") or ";base64," not in url:
        raise RequestError(f"{where}: only data:image/...;base64 URLs are accepted (this server fetches nothing)")
    try:
        raw = base64.b64decode(url.split(";base64,", 1)[1], validate=True)
        img = Image.open(io.BytesIO(raw))
        return img.convert("RGB")
    except Exception as err:  # noqa: BLE001 - any decoding problem is the client's
        raise RequestError(f"{where}: cannot decode the image: {err}") from None


def chat_to_transformers(messages) -> tuple[list[dict], list]:
    """OpenAI chat messages -> (transformers chat messages, PIL images in order)."""
    if not isinstance(messages, list) or not messages:
        raise RequestError("messages: must be a non-empty list")
    out, images = [], []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant"):
            raise RequestError(f"messages[{i}].role: must be system, user or assistant")
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise RequestError(f"messages[{i}].content: must be a string or a list of parts")
        parts = []
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind == "text":
                parts.append({"type": "text", "text": str(part.get("text", ""))})
            elif kind == "image_url":
                url = part.get("image_url")
                url = url.get("url") if isinstance(url, dict) else url
                images.append(_decode_image(url, f"messages[{i}].content[{j}].image_url"))
                parts.append({"type": "image"})
            else:
                raise RequestError(f"messages[{i}].content[{j}].type: must be text or image_url, got {kind!r}")
        out.append({"role": m["role"], "content": parts})
    return out, images


class _Handler(BaseHTTPRequestHandler):
    server_version = "airplay-vln/1"

    def log_message(self, fmt, *args):  # quiet by default; the server counts requests
        if self.server.verbose:
            super().log_message(fmt, *args)

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, code: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send(code, {"error": {"message": message, "type": kind}})

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.rstrip("/") in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": self.server.model_name, "object": "model",
                                                          "created": self.server.started, "owned_by": "airplay"}]})
        elif self.path.rstrip("/") == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._error(404, f"no route {self.path}")

    def do_POST(self):  # noqa: N802
        if self.path.rstrip("/") not in ("/v1/chat/completions", "/chat/completions"):
            self._error(404, f"no route {self.path}")
            return
        try:
            length = int(self.headers.get("Content-Length", "0"))
        except ValueError:
            length = -1
        if length <= 0 or length > MAX_BODY_BYTES:
            self._error(400, f"Content-Length: must be 1..{MAX_BODY_BYTES} bytes")
            return
        try:
            body = json.loads(self.rfile.read(length).decode())
            if not isinstance(body, dict):
                raise RequestError("body: must be a JSON object")
            messages, images = chat_to_transformers(body.get("messages"))
            max_tokens = body.get("max_completion_tokens", body.get("max_tokens", self.server.backend.max_new_tokens))
            if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or not 1 <= max_tokens <= 4096:
                raise RequestError("max_tokens: must be an integer in 1..4096")
            temperature = body.get("temperature", 0.0) or 0.0
            if not isinstance(temperature, (int, float)) or temperature < 0:
                raise RequestError("temperature: must be a number >= 0")
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            self._error(400, f"body: not JSON: {err}")
            return
        except RequestError as err:
            self._error(400, str(err))
            return
        try:
            answer, n_prompt, n_new = self.server.backend.generate_chat(messages, images, max_tokens, temperature)
        except Exception as err:  # noqa: BLE001 - report, keep serving
            self._error(500, f"generation failed: {type(err).__name__}: {err}", "server_error")
            return
        self.server.requests += 1
        self._send(200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": self.server.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer},
                         "finish_reason": "length" if n_new >= max_tokens else "stop"}],
            "usage": {"prompt_tokens": n_prompt, "completion_tokens": n_new, "total_tokens": n_prompt + n_new},
        })


class ChatServer(ThreadingHTTPServer):
    """The server object; ``url`` is the API base for :class:`~airplay.vln.backends.OpenAIBackend`."""

    daemon_threads = True

    def __init__(self, backend, host: str = "127.0.0.1", port: int = 0, model_name: str | None = None,
                 verbose: bool = False) -> None:
        super().__init__((host, port), _Handler)
        self.backend = backend
        self.model_name = model_name or backend.model_name
        self.verbose = verbose
        self.started = int(time.time())
        self.requests = 0
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ChatServer":
        """Serve in a daemon thread (tests, benchmarks); :meth:`stop` ends it."""
        self._thread = threading.Thread(target=self.serve_forever, name="vln-chat-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "ChatServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def serve(model_dir: str, host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          max_new_tokens: int = 64, model_name: str | None = None) -> int:
    """Serve ``model_dir`` until Ctrl-C (``airplay vln serve``)."""
    from airplay.vln.backends import TransformersBackend

    backend = TransformersBackend(model_dir, device=device, max_new_tokens=max_new_tokens)
    server = ChatServer(backend, host, port, model_name=model_name, verbose=True)
    print(f"serving {model_dir} as {server.model_name!r} at {server.url} (POST /chat/completions); Ctrl-C stops",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
