"""The same training step as kernels/step_benchmark_main.cc, in PyTorch.

Same model (wide_deep: per-key wide weights + dense weights + bias, plus an MLP
256-128-1 over 26 concatenated 16-dim embeddings and 13 dense features), same
inputs in host memory (unique-key rows, per-example indices, dense features,
labels, dense parameters), copied to the GPU each step, forward, backward,
and gradients copied back to the host, as the worker would push them.

    python3 kernels/torch_step_benchmark.py --batch 4096 --steps 50
"""
import argparse
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tf32", action="store_true")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = args.tf32
    device = torch.device(args.device)
    fields, dense_features, dim, hidden = 26, 13, 16, [256, 128]
    batch = args.batch
    unique = batch * fields // 3
    generator = torch.Generator().manual_seed(7)
    index = torch.randint(0, unique, (batch, fields), generator=generator, dtype=torch.int64)
    dense = (torch.rand(batch, dense_features, generator=generator) - 0.5) * 4
    labels = (torch.arange(batch) % 4 == 0).float()
    embeddings = (torch.rand(unique, dim, generator=generator) - 0.5) * 0.1
    wide = torch.zeros(unique)
    sizes = [fields * dim + dense_features] + hidden + [1]
    weights = [(torch.rand(a, b, generator=generator) - 0.5) * 0.1 for a, b in zip(sizes, sizes[1:])]
    biases = [torch.zeros(b) for b in sizes[1:]]
    wide_dense = torch.zeros(dense_features, 1)
    wide_bias = torch.zeros(1)
    host = [index, dense, labels, embeddings, wide, wide_dense, wide_bias] + weights + biases
    if device.type == "cuda":
        host = [t.pin_memory() for t in host]

    def step():
        tensors = [t.to(device, non_blocking=True) for t in host]
        index_d, dense_d, labels_d, emb_d, wide_d, wide_dense_d, wide_bias_d = tensors[:7]
        params = [emb_d, wide_d, wide_dense_d, wide_bias_d] + tensors[7:]
        for p in params:
            p.requires_grad_(True)
        ws = tensors[7:7 + len(weights)]
        bs = tensors[7 + len(weights):]
        x = torch.cat([emb_d[index_d].reshape(batch, fields * dim), dense_d], dim=1)
        for layer, (w, b) in enumerate(zip(ws, bs)):
            x = x @ w + b
            if layer + 1 < len(ws):
                x = torch.relu(x)
        logit = x.squeeze(1) + wide_d[index_d].sum(1) + (dense_d @ wide_dense_d).squeeze(1) + wide_bias_d
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, labels_d)
        grads = torch.autograd.grad(loss, params)
        return [g.to("cpu") for g in grads], loss.item()

    for _ in range(3):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        _, loss = step()
    seconds = time.perf_counter() - start
    print("backend=pytorch-%s%s model=wide_deep batch=%d examples_per_sec=%.0f loss=%.4f"
          % (device.type, "-tf32" if args.tf32 else "", batch, batch * args.steps / seconds, loss))


if __name__ == "__main__":
    main()
