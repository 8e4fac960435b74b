"""The reference implementation on PostgreSQL (docs/architecture.md).

The distribution installs four top-level packages with generic names — `model`, `impl`, `properties`,
`soak` (README "Installing the package") — so another distribution's `model` could shadow ours. This
guard makes that a clear error at import instead of running someone else's code: `impl` and `model`
must come from the same directory (the same checkout or the same site-packages).
"""

from importlib.util import find_spec as _find_spec
from pathlib import Path as _Path

_model = _find_spec("model")
_home = _Path(__file__).resolve().parent.parent
if _model is None or _model.origin is None or _Path(_model.origin).resolve().parent.parent != _home:
    raise ImportError(
        f"belay-toolkit: the top-level package `model` resolves to "
        f"{_model.origin if _model and _model.origin else 'nothing'}, not to {_home / 'model'} beside this `impl`; "
        "another distribution or directory on sys.path provides a `model` package. Install belay-toolkit "
        "into its own virtual environment (README: Installing the package)."
    )
