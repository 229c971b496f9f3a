#!/usr/bin/env python3
"""Compile one CUDA C file to PTX with NVRTC through ctypes (a development tool, no GPU needed).

usage: nvrtc_ptx.py LIBNVRTC SOURCE OUTPUT [NVRTC OPTIONS...]
"""
import ctypes
import sys


def main() -> int:
    lib_path, source_path, output_path, *options = sys.argv[1:]
    nvrtc = ctypes.CDLL(lib_path)
    with open(source_path, "rb") as f:
        source = f.read()
    prog = ctypes.c_void_p()
    name = source_path.rsplit("/", 1)[-1].encode()

    def check(call: str, rc: int) -> None:
        if rc != 0:
            nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
            msg = nvrtc.nvrtcGetErrorString(rc).decode()
            raise SystemExit(f"nvrtc_ptx: {call} failed: {msg}")

    check("nvrtcCreateProgram", nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source, name, 0, None, None))
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    rc = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    log_size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(log_size))
    log = ctypes.create_string_buffer(log_size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if log.value.strip():
        sys.stderr.write(log.value.decode())
    check("nvrtcCompileProgram", rc)
    size = ctypes.c_size_t()
    check("nvrtcGetPTXSize", nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size)))
    ptx = ctypes.create_string_buffer(size.value)
    check("nvrtcGetPTX", nvrtc.nvrtcGetPTX(prog, ptx))
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    with open(output_path, "wb") as f:
        f.write(ptx.value)
    return 0


if __name__ == "__main__":
    sys.exit(main())
