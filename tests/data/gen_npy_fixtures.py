"""Writes the .npy/.npz fixtures of tests/lua/npy_spec.lua (and the fuzz
seeds of tests/fuzz/fuzz_npy.c, fuzz_npz.c) with NumPy: run with Debian's
/usr/bin/python3 (python3-numpy) from the repository root."""
import numpy as np

d = "tests/data/"
np.save(d + "np_f32.npy", np.arange(6, dtype=np.float32).reshape(2, 3) / 4)
# big-endian float64 in Fortran order: swapped and transposed on load
np.save(d + "np_f8_be_fortran.npy", np.asfortranarray(np.arange(12, dtype=">f8").reshape(3, 4) - 5.5))
np.save(d + "np_bool.npy", np.array([[True, False, True]]))
np.save(d + "np_f16_scalar.npy", np.float16(1.5))
np.save(d + "np_i64_empty.npy", np.zeros((0, 3), dtype=np.int64))
with open(d + "np_v2.npy", "wb") as f:  # a version 2.0 header
    np.lib.format.write_array(f, np.arange(4, dtype=np.int32), version=(2, 0))
np.savez(d + "np_stored.npz", np.arange(3, dtype=np.uint8), w=np.eye(2, dtype=np.float16))
np.savez_compressed(d + "np_deflated.npz", big=np.ones((50, 40)), small=np.array([-1, 2], dtype=np.int32))
