"""Engine launch configurations for a result row (issue 16): the vLLM, SGLang or
TensorRT-LLM command line and config file, the replica count, and Kubernetes and
docker-compose manifests. Pure: plain values in, text out; the documented option lists the
commands are checked against are data (:mod:`app.core.deploy.options`)."""

from app.core.deploy.launch import (
    DEFAULT_PORT,
    MAX_PORT,
    TRTLLM_EXTRA_OPTIONS_FILE,
    LaunchConfig,
    LaunchSpec,
    build_launch_config,
    trtllm_extra_options,
)
from app.core.deploy.options import (
    ENGINE_CLIS,
    LAUNCH_ENGINES,
    TRTLLM_EXTRA_OPTION_KEYS,
    EngineCli,
    EngineOption,
)
from app.core.deploy.platforms import CUDA, Platform, platform_for
from app.core.deploy.values import ProfileValues, profile_values

__all__ = [
    "CUDA",
    "DEFAULT_PORT",
    "ENGINE_CLIS",
    "LAUNCH_ENGINES",
    "MAX_PORT",
    "TRTLLM_EXTRA_OPTIONS_FILE",
    "TRTLLM_EXTRA_OPTION_KEYS",
    "EngineCli",
    "EngineOption",
    "LaunchConfig",
    "LaunchSpec",
    "Platform",
    "ProfileValues",
    "build_launch_config",
    "platform_for",
    "profile_values",
    "trtllm_extra_options",
]
