"""Checks a pip-installed metaltopk (run by `make test-pip` from outside the checkout): the
package must load the library and header it carries, not a build in the repository, and give
the contract's answers."""

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

print(f"installed metaltopk {metaltopk.__version__} works: {metaltopk.library_path}")
