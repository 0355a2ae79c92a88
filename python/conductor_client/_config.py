"""Client-side key and type checks of register() configurations.

These are the checks the API raises ValueError for; value checks (non-empty
strings, positive block_size, supported hash recipes, ...) are the server's,
which answers INVALID_PARAMS with the same validator as its HTTP /register.
"""

from typing import Any

_INT64 = (-(1 << 63), (1 << 63) - 1)
_INT32 = (-(1 << 31), (1 << 31) - 1)

_STRING_FIELDS = frozenset(
    ("instance_id", "endpoint", "model_name", "replay_endpoint", "publisher_type", "lora_name", "tenant_id")
)
_INT_FIELDS = {"block_size": _INT64, "dp_rank": _INT32}
_PUBLISHER_TYPES = frozenset(("vLLM", "SGLang", "Mooncake"))
_PROFILE_KEYS = frozenset(("strategy", "algorithm", "python_hash_seed", "index_projection"))


def _check_int(name: str, v: Any, bounds: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int):
        raise ValueError("%s must be an int, not %s" % (name, type(v).__name__))
    if not bounds[0] <= v <= bounds[1]:
        raise ValueError("%s=%d overflows a %d-bit integer" % (name, v, 64 if bounds is _INT64 else 32))


def check_register_config(config: Any) -> None:
    """Raise ValueError where the API says register() raises."""
    if not isinstance(config, dict):
        raise ValueError("config must be a dict, not %s" % type(config).__name__)
    for key, v in config.items():
        if not isinstance(key, str):
            raise ValueError("config keys must be strings, got %r" % (key,))
        if key in _STRING_FIELDS:
            if not isinstance(v, str):
                raise ValueError("%s must be a str, not %s" % (key, type(v).__name__))
        elif key in _INT_FIELDS:
            _check_int(key, v, _INT_FIELDS[key])
        elif key == "cache_group":
            if v is not None:
                _check_int(key, v, _INT64)
        elif key == "hash_profile":
            _check_profile(v)
        else:
            raise ValueError("unknown config key %r" % key)
    t = config.get("publisher_type")
    if t is not None and t not in _PUBLISHER_TYPES:
        raise ValueError("publisher_type %r is not one of vLLM, SGLang, Mooncake" % t)


def _check_profile(p: Any) -> None:
    if not isinstance(p, dict):
        raise ValueError("hash_profile must be a dict, not %s" % type(p).__name__)
    for key, v in p.items():
        if not isinstance(key, str):
            raise ValueError("hash_profile keys must be strings, got %r" % (key,))
        if key not in _PROFILE_KEYS:
            raise ValueError("unknown hash_profile key %r (root_digest is derived by the server)" % key)
        if not isinstance(v, str):
            raise ValueError("hash_profile %s must be a str, not %s" % (key, type(v).__name__))

