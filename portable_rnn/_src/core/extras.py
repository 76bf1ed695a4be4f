"""The optional frameworks, each installed by the package's extra of its name."""

from __future__ import annotations


def missing_extra(error: ModuleNotFoundError, extra: str, framework: str) -> ModuleNotFoundError:
    """What ``import portable_rnn.<extra>`` raises for `error`: where the framework `extra` is
    the missing module, an error that names the extra that installs it (caused by `error`);
    else `error` itself (a module the framework needs, said in Python's words)."""
    if error.name != extra:
        return error
    named = ModuleNotFoundError(f"portable_rnn.{extra} needs {framework}, which is not "
                                f'installed: pip install "portable_rnn[{extra}]"', name=extra)
    named.__cause__ = error
    return named
