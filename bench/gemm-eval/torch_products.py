"""PyTorch's side of gemm-eval: the same two products (F.linear without bias, float32, weights in
nn.Linear's layout), timed the same way, in a separate process run right after gemm-eval.

usage: python torch_products.py THREADS [small|large]     (set OMP/MKL_NUM_THREADS=THREADS too)
"""
import sys
import time

import torch

threads = int(sys.argv[1])
shape = sys.argv[2] if len(sys.argv) > 2 else "large"
torch.set_num_threads(threads)
batch, context, width = (4, 512, 2048) if shape == "large" else (2, 128, 1024)
m, hidden = batch * context, 4 * width
x = torch.rand(m, width) - 0.5
w1 = torch.rand(hidden, width) - 0.5
w2 = torch.rand(width, hidden) - 0.5
times = []
with torch.inference_mode():
    for i in range(10):  # 2 warm-up passes, 8 timed, as gemm-eval 8
        start = time.perf_counter()
        h = torch.nn.functional.linear(x, w1)
        torch.nn.functional.linear(h, w2)
        if i >= 2:
            times.append(time.perf_counter() - start)
times.sort()
median = times[len(times) // 2]
flops = 4 * m * width * hidden
print(f"{batch},{context},{width}\t{threads}\ttorch {torch.__version__}\tmedian {median * 1e3:8.2f} ms"
      f"\tmin {times[0] * 1e3:8.2f} ms\t{flops / median / 1e9:6.1f} GFLOP/s")
