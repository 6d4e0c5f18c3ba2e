"""One-release alias of the old import path: import the module named below instead."""

import sys

from hermes_store.ops import storage as _target

sys.modules[__name__] = _target
