// Shim (bench/peers): the peer kernels compiled by the harness use nothing of this torch header.
#pragma once
