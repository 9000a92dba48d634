"""Prints make variables for building the C++ layer against the installed torch."""
import sysconfig

import torch
from torch.utils import cpp_extension

inc = cpp_extension.include_paths() + [sysconfig.get_paths()["include"]]
abi = int(torch._C._GLIBCXX_USE_CXX11_ABI)
libdir = cpp_extension.library_paths()[0]
print("TORCH_CXXFLAGS = " + " ".join(f"-isystem {p}" for p in inc)
      + f" -D_GLIBCXX_USE_CXX11_ABI={abi} -DTORCH_API_INCLUDE_EXTENSION_H -DTORCH_EXTENSION_NAME=_C")
print(f"TORCH_LDFLAGS = -L{libdir} -lc10 -ltorch -ltorch_cpu -ltorch_python -Wl,-rpath,{libdir}")
print("PY_EXT_SUFFIX = " + sysconfig.get_config_var("EXT_SUFFIX"))
