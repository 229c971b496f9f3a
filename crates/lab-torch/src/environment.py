#!/usr/bin/env python3
"""iteragpu's torch engine, diagnosis: `iteragpu environment --engine torch` describes the GPUs
through the machine's PyTorch (CUDA or ROCm), for machines whose GPUs the native engine cannot
open (an AMD MI300X under ROCm).

This file is carried inside the binary beside engine.py and run with `python -c`; it prints one
JSON object on stdout, which iteragpu turns into its environment or lot document and checks with
the same lot rules as the native engine's facts:

- torch: torch.__version__, torch.version.cuda / torch.version.hip, torch.cuda.device_count();
- each GPU: torch.cuda.get_device_properties (name, compute capability or gcnArchName,
  multiprocessor count, total memory, UUID, PCI location where this torch exposes them) and
  torch.cuda.mem_get_info (device-wide free memory, read with a context of our own);
- peers: torch.cuda.can_device_access_peer for every ordered pair;
- on ROCm, the AMD SMI library (the `amdsmi` Python module) when it imports, matched to torch's
  GPUs by PCI address: clocks, power, temperature, PCIe link, ECC counts, bad pages, processes.

Whatever cannot be read is written as "unavailable (why)" in the details and null in the facts:
never a guess.

usage: environment.py --devices all|N[,M...]
Exit: 0 described (with or without a usable GPU: the object says why not), 2 refused: bad
options, or no torch (one sentence on stderr, nothing on stdout).
"""
import argparse
import json
import os
import sys

PROGRAM_VERSION = 1
PREFIX = "iteragpu: torch engine"
# PCIe transfer rates (MT/s, as the AMD SMI library reports them) by generation.
PCIE_MT_S = {2500: 1, 5000: 2, 8000: 3, 16000: 4, 32000: 5, 64000: 6}


class Refused(Exception):
    """A refusal before anything is printed: exit 2, one sentence."""


def parse_args(argv):
    p = argparse.ArgumentParser(prog="environment.py",
                                description="iteragpu's GPU diagnosis through PyTorch")
    p.add_argument("--devices", required=True, help="all, or CUDA/HIP ordinals: 0 or 0,1")
    # Never a product path: torch's CPU device stands in for one GPU, so that a machine without a
    # GPU can test the program, the document and the lot checks. Marked in every field it fills.
    p.add_argument("--test-only-cpu", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.devices != "all":
        try:
            a.ordinals = [int(x) for x in a.devices.split(",")]
        except ValueError:
            raise Refused(f"--devices {a.devices!r}: expected all or ordinals such as 0,1")
        if any(o < 0 for o in a.ordinals) or len(set(a.ordinals)) != len(a.ordinals):
            raise Refused(f"--devices {a.devices!r}: ordinals must be distinct and at least 0")
    else:
        a.ordinals = None
    return a


def unavailable(why):
    return f"unavailable ({why})"


def import_torch():
    try:
        import torch
        return torch
    except Exception as e:  # ImportError, or a broken install (OSError on a missing library)
        raise Refused(f"PyTorch cannot be imported by {sys.executable} ({type(e).__name__}: {e}); "
                      "install PyTorch for ROCm or CUDA there, or give --python another Python")


def torch_build(torch):
    hip = getattr(torch.version, "hip", None)
    if hip:
        return f"ROCm, HIP {hip}"
    if torch.version.cuda:
        return f"CUDA {torch.version.cuda}"
    return "CPU only"


def no_gpu_problem(torch, build):
    why = (f"torch {torch.__version__} ({build}) in {sys.executable} sees no GPU "
           "(torch.cuda.is_available() is False)")
    if build == "CPU only":
        return why + ": it is a CPU-only build; install PyTorch for ROCm or CUDA"
    return why + (": no GPU driver is loaded, or HIP_VISIBLE_DEVICES / CUDA_VISIBLE_DEVICES hide "
                  "every GPU")


class Smi:
    """The AMD SMI library's view of the GPUs, keyed by PCI address; `problem` says why not."""

    def __init__(self, hip, test_only_cpu):
        self.lib = None
        self.handles = {}
        self.library = None
        self.problem = None
        if test_only_cpu:
            self.problem = "--test-only-cpu: torch's CPU device has no management library"
            return
        if not hip:
            self.problem = ("a CUDA build of torch: clocks, power, ECC and processes of NVIDIA GPUs "
                            "are read through NVML by the native engine (environment without "
                            "--engine torch)")
            return
        try:
            import amdsmi
        except Exception as e:
            self.problem = (f"the AMD SMI library's Python module amdsmi cannot be imported by "
                            f"{sys.executable} ({type(e).__name__}: {e}); ROCm ships it under "
                            "/opt/rocm/share/amd_smi")
            return
        try:
            amdsmi.amdsmi_init()
            for h in amdsmi.amdsmi_get_processor_handles():
                bdf = amdsmi.amdsmi_get_gpu_device_bdf(h)
                self.handles[normal_bdf(bdf)] = h
        except Exception as e:
            self.problem = f"amdsmi could not list the GPUs ({type(e).__name__}: {e})"
            return
        self.lib = amdsmi
        self.library = getattr(amdsmi, "__file__", "amdsmi")

    def close(self):
        if self.lib is not None:
            try:
                self.lib.amdsmi_shut_down()
            except Exception:
                pass

    def describe(self, bdf, facts):
        """The readings of the GPU at `bdf` into `facts` (typed) and a details dict (values or
        "unavailable (why)")."""
        if self.lib is None:
            return {"library": None, "problem": self.problem}
        h = self.handles.get(normal_bdf(bdf)) if bdf else None
        if h is None:
            why = ("torch does not give this GPU's PCI address" if not bdf else
                   f"the AMD SMI library lists no GPU at {bdf}")
            return {"library": self.library, "problem": why}
        facts["nvml_matched"] = True
        s = self.lib
        out = {"library": self.library, "problem": None, "pci_address": bdf}

        def read(key, call):
            try:
                value = call()
            except Exception as e:
                out[key] = unavailable(f"{type(e).__name__}: {e}")
                return None
            out[key] = value
            return value

        read("driver", lambda: s.amdsmi_get_gpu_driver_info(h))
        asic = read("asic", lambda: s.amdsmi_get_gpu_asic_info(h))
        if isinstance(asic, dict) and not facts.get("name"):
            facts["name"] = asic.get("market_name") or ""
        gfx = read("gfx_clock_mhz", lambda: s.amdsmi_get_clock_info(h, s.AmdSmiClkType.GFX))
        if isinstance(gfx, dict):
            facts["sm_clock_mhz"] = number(gfx.get("clk"))
            facts["max_sm_clock_mhz"] = number(gfx.get("max_clk"))
        read("memory_clock_mhz", lambda: s.amdsmi_get_clock_info(h, s.AmdSmiClkType.MEM))
        read("power_w", lambda: s.amdsmi_get_power_info(h))
        cap = read("power_cap_uw", lambda: s.amdsmi_get_power_cap_info(h))
        if isinstance(cap, dict):
            limit, default = number(cap.get("power_cap")), number(cap.get("default_power_cap"))
            facts["power_limit_watts"] = limit / 1e6 if limit else None
            facts["default_power_limit_watts"] = default / 1e6 if default else None
        for sensor in ("EDGE", "HOTSPOT", "VRAM"):
            kind = getattr(s.AmdSmiTemperatureType, sensor)
            read(f"temperature_{sensor.lower()}_c",
                 lambda kind=kind: s.amdsmi_get_temp_metric(h, kind, s.AmdSmiTemperatureMetric.CURRENT))
        pcie = read("pcie", lambda: s.amdsmi_get_pcie_info(h))
        if isinstance(pcie, dict):
            metric, static = pcie.get("pcie_metric") or {}, pcie.get("pcie_static") or {}
            facts["pcie_generation"] = PCIE_MT_S.get(number(metric.get("pcie_speed")))
            facts["pcie_width"] = number(metric.get("pcie_width"))
            facts["pcie_max_generation"] = PCIE_MT_S.get(number(static.get("max_pcie_speed")))
            facts["pcie_max_width"] = number(static.get("max_pcie_width"))
            facts["pcie_gpu_max_generation"] = number(static.get("pcie_interface_version"))
        ecc_on = read("ecc_enabled_blocks", lambda: s.amdsmi_get_gpu_ecc_enabled(h))
        if isinstance(ecc_on, int):
            facts["ecc_enabled"] = ecc_on != 0
        ecc = read("ecc_counts", lambda: s.amdsmi_get_gpu_total_ecc_count(h))
        if isinstance(ecc, dict):
            facts["ecc_uncorrected_volatile"] = number(ecc.get("uncorrectable_count"))
            facts["ecc_corrected_volatile"] = number(ecc.get("correctable_count"))
        pages = read("bad_pages", lambda: s.amdsmi_get_gpu_bad_page_info(h))
        if isinstance(pages, list):
            status = s.AmdSmiMemoryPageStatus
            facts["retired_pages"] = sum(1 for p in pages if p.get("status") == status.RESERVED)
            facts["retired_pages_pending"] = any(p.get("status") == status.PENDING for p in pages)
            out["bad_pages"] = len(pages)
        procs = read("processes", lambda: s.amdsmi_get_gpu_process_list(h))
        if isinstance(procs, list):
            others = [{"pid": int(p.get("pid", 0)), "used_bytes": number(p.get("mem"))}
                      for p in procs if isinstance(p, dict) and p.get("pid") != os.getpid()]
            facts["other_processes"] = others
            out["processes"] = others
        return out


def number(v):
    """An integer reading, or None for a missing one or the library's 'N/A'."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return int(v)


def normal_bdf(bdf):
    """`0000:C1:00.0` and `0000:c1:00.0` name the same GPU; the function is dropped."""
    return str(bdf).strip().lower().rsplit(".", 1)[0]


def pci_address(props):
    bus, dev, dom = (getattr(props, k, None) for k in ("pci_bus_id", "pci_device_id", "pci_domain_id"))
    if bus is None or dev is None or dom is None:
        return None
    return f"{dom:04x}:{bus:02x}:{dev:02x}.0"


class CpuProps:
    """--test-only-cpu: the host's figures in the shape of torch's device properties."""

    def __init__(self):
        pages = os.sysconf("SC_PHYS_PAGES") if hasattr(os, "sysconf") else 0
        self.name = "torch CPU device (--test-only-cpu, not a GPU)"
        self.major, self.minor = 0, 0
        self.multi_processor_count = os.cpu_count() or 0
        self.total_memory = pages * os.sysconf("SC_PAGE_SIZE") if pages else 0
        self.uuid = ""


def cpu_free_bytes():
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def describe_device(torch, index, smi, hip, cpu):
    device = f"cuda:{index}"
    facts = {"device": device, "nvml_matched": False}
    gpu = {}
    try:
        props = CpuProps() if cpu else torch.cuda.get_device_properties(index)
    except Exception as e:
        return {"device": device, "usable": False,
                "problem": f"{device}: torch cannot read its properties ({type(e).__name__}: {e})",
                "details": {"gpu": None, "management": {"library": None, "problem": smi.problem}},
                "facts": None}
    arch = getattr(props, "gcnArchName", None) if hip else (
        None if cpu else f"sm_{props.major}{props.minor}")
    uuid = str(getattr(props, "uuid", "") or "")
    bdf = None if cpu else pci_address(props)
    gpu.update({
        "name": props.name,
        "compute_capability": f"{props.major}.{props.minor}",
        "architecture": arch or unavailable("torch gives no architecture name"),
        "sm_count": props.multi_processor_count,
        "total_memory_bytes": props.total_memory,
        "uuid": uuid or unavailable("torch gives no UUID for this device"),
        "pci_address": bdf or unavailable("this torch gives no PCI location"),
    })
    clock = getattr(props, "clock_rate", 0)
    gpu["peak_clock_mhz"] = clock // 1000 if clock else unavailable("torch gives no clock rate")
    facts.update({"name": props.name, "uuid": uuid,
                  "compute_capability": f"{props.major}.{props.minor}",
                  "total_memory_bytes": props.total_memory})
    problem = None
    try:
        if cpu:
            free = cpu_free_bytes()
        else:
            free, _total = torch.cuda.mem_get_info(index)
        gpu["free_memory_bytes"] = free
        facts["free_memory_bytes"] = free
    except Exception as e:
        gpu["free_memory_bytes"] = unavailable(f"{type(e).__name__}: {e}")
        problem = f"{device}: torch cannot open it ({type(e).__name__}: {e})"
    management = smi.describe(bdf, facts)
    if not facts.get("name"):
        facts["name"] = gpu["name"]
    return {"device": device, "usable": problem is None, "problem": problem,
            "details": {"gpu": gpu, "management": management}, "facts": facts}


def main(argv):
    a = parse_args(argv)
    torch = import_torch()
    build = torch_build(torch)
    hip = bool(getattr(torch.version, "hip", None))
    cpu = a.test_only_cpu
    out = {
        "engine": {"name": "torch", "version": torch.__version__,
                   "build": "CPU only (--test-only-cpu: torch's CPU device stands in for a GPU)"
                   if cpu else build,
                   "python": sys.executable},
        "program_version": PROGRAM_VERSION,
        "backend": "torch-cpu-test-only" if cpu else ("torch-rocm" if hip else "torch-cuda"),
        "visible": None, "problem": None, "management": None, "devices": [], "peers": [],
    }
    if cpu:
        visible = 1
    elif not torch.cuda.is_available():
        out["visible"] = 0
        out["problem"] = no_gpu_problem(torch, build)
        print(json.dumps(out))
        return 0
    else:
        visible = torch.cuda.device_count()
    out["visible"] = visible
    ordinals = list(range(visible)) if a.ordinals is None else a.ordinals
    past = [o for o in ordinals if o >= visible]
    if past:
        out["problem"] = (f"cuda:{past[0]}: torch sees {visible} GPU(s), cuda:0 to "
                          f"cuda:{visible - 1}")
    smi = Smi(hip, cpu)
    out["management"] = {"library": smi.library, "problem": smi.problem}
    present = [o for o in ordinals if o < visible]
    try:
        for o in present:
            out["devices"].append(describe_device(torch, o, smi, hip, cpu))
    finally:
        smi.close()
    if not cpu:
        for i in present:
            for j in present:
                if i != j:
                    try:
                        can = bool(torch.cuda.can_device_access_peer(i, j))
                    except Exception:
                        continue
                    out["peers"].append({"from": f"cuda:{i}", "to": f"cuda:{j}", "can_access": can})
    print(json.dumps(out))
    return 0


def entry(argv):
    try:
        return main(argv)
    except Refused as e:
        print(f"{PREFIX}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(entry(sys.argv[1:]))
