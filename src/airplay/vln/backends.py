"""Where AirVLN-R1's answers come from: a local transformers model or an OpenAI-compatible server.

Both take the same :class:`airplay.vln.prompt.Prompt` and return the answer text:

* :class:`TransformersBackend` - Qwen2.5-VL from a local folder (a released checkpoint such as
  the AirVLN-R1 weights, or :func:`airplay.vln.tiny.make_tiny_qwen2_5_vl`), loaded with
  ``AutoProcessor`` and ``Qwen2_5_VLForConditionalGeneration.from_pretrained``, on ``cpu`` or
  ``cuda``, greedy decoding (``do_sample=False``), at most ``max_new_tokens`` new tokens.
* :class:`OpenAIBackend` - ``POST {endpoint}/chat/completions`` (the endpoint is the API base,
  e.g. ``http://127.0.0.1:8000/v1``; a bare ``http://host:port`` gets ``/v1``) with the images
  as base64 PNG data URLs, ``temperature 0``, using only ``urllib``. vLLM, SGLang, LMDeploy or
  :mod:`airplay.vln.server` serve it. The API key comes from ``api_key`` or ``$OPENAI_API_KEY``
  (none is sent if neither is set).

Errors (missing folder, wrong model type, unreachable server, HTTP errors) raise
:class:`BackendError` with the folder or URL in the message. torch and transformers are
imported only by the transformers backend.
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from airplay.vln.prompt import Prompt

BACKENDS = ("transformers", "openai")


class BackendError(RuntimeError):
    """A backend could not be set up or did not answer; the message says where and why."""


class TransformersBackend:
    """Qwen2.5-VL in this process (see the module docstring)."""

    name = "transformers"

    def __init__(self, model_dir: str | Path, device: str = "cpu", max_new_tokens: int = 64,
                 dtype: str = "auto") -> None:
        self.model_dir = Path(model_dir)
        cfg_path = self.model_dir / "config.json"
        if not self.model_dir.is_dir():
            raise BackendError(f"model folder {self.model_dir} does not exist")
        if not cfg_path.is_file():
            raise BackendError(f"{cfg_path}: missing; the model folder must hold a transformers checkpoint "
                               f"(config.json, *.safetensors, tokenizer and processor files)")
        try:
            model_type = json.loads(cfg_path.read_text()).get("model_type")
        except (OSError, json.JSONDecodeError) as err:
            raise BackendError(f"{cfg_path}: cannot read: {err}") from None
        if model_type not in ("qwen2_5_vl", "qwen2_vl"):
            raise BackendError(f"{cfg_path}: model_type {model_type!r}; AirVLN-R1 is a Qwen2.5-VL model "
                               f"(model_type 'qwen2_5_vl')")
        import torch
        from transformers import AutoProcessor

        if model_type == "qwen2_5_vl":
            from transformers import Qwen2_5_VLForConditionalGeneration as ModelClass
        else:
            from transformers import Qwen2VLForConditionalGeneration as ModelClass
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError(f"device {device!r} requested but torch sees no CUDA device")
        torch_dtype = {"auto": "auto", "float32": torch.float32, "bfloat16": torch.bfloat16,
                       "float16": torch.float16}.get(dtype)
        if torch_dtype is None:
            raise BackendError(f"dtype must be auto, float32, bfloat16 or float16, got {dtype!r}")
        try:
            self.processor = AutoProcessor.from_pretrained(self.model_dir)
            self.model = ModelClass.from_pretrained(self.model_dir, dtype=torch_dtype).to(device)
        except (OSError, ValueError) as err:
            raise BackendError(f"{self.model_dir}: cannot load the model: {err}") from None
        self.model.eval()
        self.device = device
        self.max_new_tokens = int(max_new_tokens)
        self.model_name = self.model_dir.name
        self._lock = threading.Lock()  # one generation at a time (the server is threaded)

    def generate_chat(self, messages: list[dict], images: list, max_new_tokens: int | None = None,
                      temperature: float = 0.0) -> tuple[str, int, int]:
        """(answer, prompt tokens, completion tokens) for chat ``messages`` with PIL ``images``
        (one per ``{"type": "image"}`` part, in order). Greedy unless ``temperature`` > 0."""
        import torch

        text = self.processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        inputs = self.processor(text=[text], images=images or None, return_tensors="pt").to(self.device)
        kwargs = {"max_new_tokens": int(max_new_tokens or self.max_new_tokens)}
        if temperature and temperature > 0:
            kwargs.update(do_sample=True, temperature=float(temperature))
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        with self._lock, torch.inference_mode():
            out = self.model.generate(**inputs, **kwargs)
        new = out[:, inputs["input_ids"].shape[1]:]
        answer = self.processor.batch_decode(new, skip_special_tokens=True)[0]
        return answer, int(inputs["input_ids"].shape[1]), int(new.shape[1])

    def generate(self, prompt: Prompt) -> str:
        messages, images = prompt.chat_messages()
        return self.generate_chat(messages, images)[0]

    def close(self) -> None:
        pass


def api_base(endpoint: str) -> str:
    """``http://host:port`` -> ``http://host:port/v1``; ``.../v1`` and ``.../v1/`` unchanged."""
    base = endpoint.rstrip("/")
    if base.endswith("/chat/completions"):
        base = base[: -len("/chat/completions")]
    if not base.startswith(("http://", "https://")):
        raise BackendError(f"endpoint {endpoint!r} must be an http:// or https:// URL")
    if not base.rsplit("/", 1)[-1].startswith("v1") and base.count("/") <= 2:
        base += "/v1"
    return base


class OpenAIBackend:
    """Chat completions against an OpenAI-compatible server (see the module docstring).

    model: the served model name (default: the first of ``GET /models``).
    """

    name = "openai"

    def __init__(self, endpoint: str, model: str | None = None, api_key: str | None = None,
                 max_new_tokens: int = 64, timeout_s: float = 120.0, retries: int = 2) -> None:
        self.base = api_base(endpoint)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY", "")
        self.max_new_tokens = int(max_new_tokens)
        self.timeout_s = float(timeout_s)
        self.retries = int(retries)
        self.model_name = model or self._first_model()

    def _request(self, path: str, body: dict | None = None) -> dict:
        url = self.base + path
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(url, data=data, headers=headers, method="GET" if body is None else "POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    return json.loads(resp.read().decode())
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace")[:500]
                if err.code < 500:
                    raise BackendError(f"{url}: HTTP {err.code}: {detail}") from None
                last = f"HTTP {err.code}: {detail}"
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                last = str(getattr(err, "reason", err))
            except json.JSONDecodeError as err:
                raise BackendError(f"{url}: the answer is not JSON: {err}") from None
            time.sleep(0.2 * (attempt + 1))
        raise BackendError(f"{url}: no answer after {self.retries + 1} tries: {last}")

    def _first_model(self) -> str:
        models = self._request("/models").get("data") or []
        if not models:
            raise BackendError(f"{self.base}/models lists no model; pass the model name")
        return str(models[0]["id"])

    def generate(self, prompt: Prompt) -> str:
        body = {"model": self.model_name, "messages": prompt.openai_messages(), "temperature": 0.0,
                "max_tokens": self.max_new_tokens}
        answer = self._request("/chat/completions", body)
        try:
            return answer["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.base}/chat/completions: unexpected answer {json.dumps(answer)[:300]}") from None

    def close(self) -> None:
        pass


def make_backend(kind: str, model: str | Path | None = None, endpoint: str | None = None, device: str = "cpu",
                 max_new_tokens: int = 64, served_model: str | None = None):
    """The backend ``kind`` ("transformers" needs ``model``, a folder; "openai" needs ``endpoint``)."""
    if kind == "transformers":
        if not model:
            raise BackendError("the transformers backend needs --model DIR (a local Qwen2.5-VL folder)")
        return TransformersBackend(model, device=device, max_new_tokens=max_new_tokens)
    if kind == "openai":
        if not endpoint:
            raise BackendError("the openai backend needs --endpoint URL (e.g. http://127.0.0.1:8000/v1)")
        return OpenAIBackend(endpoint, model=served_model, max_new_tokens=max_new_tokens)
    raise BackendError(f"unknown VLN backend {kind!r}; choose one of {', '.join(BACKENDS)}")
