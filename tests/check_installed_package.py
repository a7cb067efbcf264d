"""Checks a pip-installed metaltopk (run by `make test-pip` from outside the checkout): the
package must load the library and header it carries, not a build in the repository, and give
the contract's answers.

    check_installed_package.py [--torch-parts=built|absent]

built: the package carries the AOTInductor shim and the torch fast path, built for the torch of
this interpreter, and both load (an install with --no-build-isolation where torch is). absent: it
carries neither (an install whose build saw no torch), whatever earlier builds from the same
checkout left behind."""

import sys
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16

import metaltopk

package_dir = Path(metaltopk.__file__).resolve().parent
assert metaltopk.library_path.resolve().parent == package_dir, metaltopk.library_path
assert (package_dir / "metaltopk.h").is_file()
assert "site-packages" in package_dir.parts, package_dir

values, indices = metaltopk.topk(np.arange(5.0), 2)
assert values.tolist() == [4.0, 3.0] and indices.tolist() == [4, 3]

x = np.array([np.nan, np.inf, 1e4, 0.0, -1e4, -np.inf], dtype=np.float32).astype(bfloat16)
values, indices = metaltopk.topk(x, 4, largest=False)
assert indices.tolist() == [5, 4, 3, 2] and values.dtype == bfloat16

values, indices = metaltopk.topk(np.array([[3, 2, 3, 2, 1, 1]], dtype=np.int8).T, 2, dim=0)
assert indices[:, 0].tolist() == [0, 2]

for error, call in ((ValueError, lambda: metaltopk.topk(np.zeros(5), 6)),
                    (IndexError, lambda: metaltopk.topk(np.zeros(5), 1, dim=1)),
                    (TypeError, lambda: metaltopk.topk(np.zeros(5, dtype=bool), 1))):
    try:
        call()
    except error:
        pass
    else:
        raise AssertionError(f"no {error.__name__}")

torch_parts = {"--torch-parts=built": "built", "--torch-parts=absent": "absent"}.get(
    (sys.argv[1:] or [""])[0])
shipped = sorted(path.name for path in package_dir.iterdir()
                 if path.name.startswith(("libmetaltopk_aoti", "_metaltopk_torch")))
if torch_parts == "absent":
    assert not shipped, f"an install built without torch carries {shipped}"
elif torch_parts == "built":
    import torch
    from metaltopk.torch import _tensors, load_aoti_library

    stamp = (package_dir / "_metaltopk_torch.torch_version").read_text().strip()
    assert stamp == torch.__version__, (stamp, torch.__version__)
    assert _tensors._fast_path is not None, "the torch fast path did not load"
    load_aoti_library()
    values, indices = metaltopk.topk(torch.arange(5.0), 2)
    assert values.tolist() == [4.0, 3.0] and indices.tolist() == [4, 3]
    print(f"torch {torch.__version__}: the fast path and the AOTInductor shim load")

print(f"installed metaltopk {metaltopk.__version__} works: {metaltopk.library_path}; "
      f"torch parts shipped: {', '.join(shipped) or 'none'}")
