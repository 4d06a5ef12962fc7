"""Serve a GGUF over HTTP with llama-cpp-python's OpenAI-compatible server.

Same arguments as ``python -m llama_cpp.server``; the difference is that the model loads with
the same extra-buffer rule as :class:`pipeline.backends.llamacpp.LlamaCppBackend` (off on a
llama.cpp build with AMX kernels, which crash on some hosts). Needs the server dependencies
(``fastapi``, ``uvicorn``, ``sse-starlette``, ``starlette-context``, ``pydantic-settings``).

Example::

    python -m pipeline.backends.llamacpp_serve --model model.gguf --host 127.0.0.1 --port 8081
"""

from __future__ import annotations

from pipeline.backends.llamacpp import build_has_amx, model_params_override


def main() -> None:
    """Run ``llama_cpp.server`` (reads ``sys.argv``)."""
    from llama_cpp.server.__main__ import main as server_main

    with model_params_override(use_extra_bufts=not build_has_amx()):
        server_main()


if __name__ == "__main__":
    main()
