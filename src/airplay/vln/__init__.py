"""AirVLN-R1 in airplay: vision-language navigation from instructions (docs/vln.md).

One job per module, none needs rclpy; torch and transformers are imported only where a model runs:

* :mod:`~airplay.vln.actions` - action names, magnitudes, per-scene scaling (config/vln.yaml)
* :mod:`~airplay.vln.action_executor` - one discrete action -> 50 Hz commands through the safety supervisor
* :mod:`~airplay.vln.episodes` - VLN episodes: made from tasks, written, imported
* :mod:`~airplay.vln.instructions` - template instructions in ten personas' styles; optional LLM rewrite
* :mod:`~airplay.vln.prompt` - the AirNav-style prompt; progressive interval sampling of history views
* :mod:`~airplay.vln.parsing` - robust parsing of the JSON action list
* :mod:`~airplay.vln.backends` - transformers (local Qwen2.5-VL) and openai (any compatible server)
* :mod:`~airplay.vln.navigator` - the AirVLN-R1 policy behind the Policy contract
* :mod:`~airplay.vln.evaluate` - VLN episodes in-process, metrics overall and per persona
* :mod:`~airplay.vln.rewards` - GRPO rewards (TRL reward-function signature)
* :mod:`~airplay.vln.sft_export` - SFT data (ShareGPT / LLaMA-Factory) from expert episodes
* :mod:`~airplay.vln.server` - a small OpenAI-compatible server for a local model
* :mod:`~airplay.vln.tiny` - a tiny random Qwen2.5-VL for tests and benchmarks
* :mod:`~airplay.commands.vln` - ``airplay vln episodes | sft-export | serve``
"""
