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
_CONFIG_KEYS = tuple(sorted(_STRING_FIELDS | set(_INT_FIELDS) | {"cache_group", "hash_profile"}))
# The HTTP /register names register() does not take, and its names for them.
_HTTP_NAMES = {"modelname": "model_name", "type": "publisher_type"}


def _distance(a: str, b: str) -> int:
    """The Levenshtein distance between a and b."""
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        cur = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
        prev = cur
    return prev[len(b)]


def _nearest(name: str, known: Any) -> str:
    """The known name name was likely meant to be ("" for none), by the
    server's rule: one that name begins, or one within a third of name's
    length in edits (at most 3)."""
    best, best_d = "", min(3, len(name) // 3) + 1
    for k in sorted(known):
        d = _distance(name, k)
        if name and len(k) > len(name) and k.startswith(name):
            d = min(d, 1)
        if d < best_d:
            best, best_d = k, d
    return best


def _unknown(what: str, key: str, known: Any, note: str = "") -> ValueError:
    near = _HTTP_NAMES.get(key) if what == "config" else None
    near = near or _nearest(key, known)
    msg = "unknown %s key %r" % (what, key)
    if near:
        msg += "; did you mean %r?" % near
    return ValueError(msg + note)


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
            raise _unknown("config", key, _CONFIG_KEYS)
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
            note = " (root_digest is derived by the server)" if key == "root_digest" else ""
            raise _unknown("hash_profile", key, _PROFILE_KEYS, note)
        if not isinstance(v, str):
            raise ValueError("hash_profile %s must be a str, not %s" % (key, type(v).__name__))

