#!/usr/bin/env python3
"""qkv explore on GPT-2 small at its whole context: a benchmark of the page's size, its opening time
and its head switches in headless chromium, and a check of its numbers. Not a test (it takes minutes
and its figures are times).

  /usr/bin/python3 bench/explore_gpt2_bench.py --qkv build/qkv --npm-dir build/npm [--runs 5]

1. The PyTorch twin (tests/pytorch/gpt_model.py: torch.manual_seed(123); GPTModel(GPT-2 small);
   LayerNorms and biases moved off their initial values) written in Hugging Face's layout
   (model.safetensors + config.json).
2. A text of --prompt tokens (992: with --generate 32 the page holds GPT-2's whole context, 1,024).
3. `qkv explore --weights DIR --text-file T --generate 32 --max-page-size 60000000`: the page.
4. Chromium opens it --runs times (goto until the first view is drawn), then switches heads in the
   pipeline, neuron and heads views (a head not shown before each time, so that the page computes
   its weights) and times each switch until the next frame.
5. The page's weights for sampled layers, heads and query rows (some of them generated tokens)
   against `qkv forward --module gpt --attn-weights` on the page's ids: the largest difference.
6. With --shots DIR, a screenshot of each view (docs/explore/gpt2-small-1024.*.png are these).
"""
import argparse
import json
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "pytorch"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "explore"))
import gpt_model  # noqa: E402
import safetensors_io  # noqa: E402
from test_explore import ensure_packages  # noqa: E402

NODE = r"""
const { chromium } = require(require("path").join(process.argv[2], "node_modules", "playwright-core"));
const [file, runs, profile, samples, shots] = [process.argv[3], +process.argv[4], process.argv[5], JSON.parse(process.argv[6]), process.argv[7]];
(async () => {
  const ctx = await chromium.launchPersistentContext(profile, { executablePath: "/usr/bin/chromium", headless: true,
    viewport: { width: 1400, height: 1000 }, args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  const out = { open_ms: [], switch_ms: {}, rows: [] };
  let page;
  for (let r = 0; r < runs; ++r) {
    if (page) await page.close();
    page = await ctx.newPage(); const errors = []; page.on("pageerror", (e) => errors.push(String(e)));
    const t0 = Date.now();
    await page.goto("file://" + file); await page.waitForSelector("body[data-ready='1']", { timeout: 600000 });
    out.open_ms.push(Date.now() - t0);
    if (errors.length) { console.error(errors.join("\n")); process.exit(1); }
  }
  // head switches: each to a head this page has not computed yet
  const L = await page.evaluate(() => window.qkvExplore.data.layers.length), H = await page.evaluate(() => window.qkvExplore.data.heads);
  const fresh = []; for (let l = 0; l < L; ++l) for (let h = 0; h < H; ++h) fresh.push([l, h]);
  const plan = { pipeline: fresh.filter(([l]) => l === 0).slice(1, 7), neuron: fresh.filter(([l]) => l % 2 === 1).slice(0, 6),
                 heads: fresh.filter(([l]) => l % 2 === 0 && l > 0).slice(0, 6) };
  for (const [view, pairs] of Object.entries(plan)) {
    out.switch_ms[view] = [];
    for (const [l, h] of pairs) {
      const ms = await page.evaluate(([v, l, h]) => new Promise((resolve) => { const t = performance.now();
        Object.assign(window.qkvExplore.state, { view: v, layer: l, head: h, solo: v === "heads" ? h : -1 }); window.qkvExplore.render();
        requestAnimationFrame(() => resolve(performance.now() - t)); }), [view, l, h]);
      out.switch_ms[view].push(Math.round(ms));
    }
  }
  for (const [l, h, i] of samples) out.rows.push(await page.evaluate(([l, h, i]) => { const E = window.qkvExplore, w = E.tensor(E.data.layers[l].weights);
    return Array.from({ length: E.data.tokens.length }, (_, j) => w.at(h, i, j)); }, [l, h, i]));
  out.ids = await page.evaluate(() => window.qkvExplore.data.ids);
  if (shots) for (const [view, state] of [["pipeline", { layer: 0, head: 3 }], ["heads", { layer: 5, head: 1, solo: -1 }], ["model", {}],
                                          ["neuron", { layer: 5, head: 1, query: 1023 }], ["patterns", {}], ["lens", {}]]) {
    await page.evaluate(([v, st]) => { Object.assign(window.qkvExplore.state, { view: v, solo: -1 }, st); window.qkvExplore.render(); window.scrollTo(0, 0);
      const c = v === "pipeline" && window.qkvExplore.cell("trf_blocks.0.attn_weights", 0, 0);  // the weights, not the input above them
      if (c) window.scrollTo(0, document.getElementById("view").getBoundingClientRect().top + c.y - 60); }, [view, state]);
    await page.screenshot({ path: `${shots}/gpt2-small-1024.${view}.png` });
  }
  await ctx.close(); console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return r.stdout


def median(v):
    v = sorted(v)
    return v[len(v) // 2]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--prompt", type=int, default=992)
    ap.add_argument("--generate", type=int, default=32)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-mb", type=float, default=60.0, help="the page's bound, in 10^6 bytes")
    ap.add_argument("--text-file", default="/usr/share/common-licenses/GPL-3")
    ap.add_argument("--shots", help="a screenshot of each view into this folder (gpt2-small-1024.VIEW.png)")
    args = ap.parse_args()
    ensure_packages(args.npm_dir)
    qkv = os.path.abspath(args.qkv)
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(123)
        cfg = dict(vocab_size=50257, context_length=1024, emb_dim=768, n_heads=12, n_layers=12, drop_rate=0.0, qkv_bias=True)
        m = gpt_model.perturb(gpt_model.GPTModel(cfg), 124).eval()
        model_dir = os.path.join(tmp, "gpt2")
        os.makedirs(model_dir)
        safetensors_io.save(os.path.join(model_dir, "model.safetensors"), gpt_model.to_hugging_face(m.state_dict()))
        with open(os.path.join(model_dir, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "n_embd": 768, "n_head": 12, "n_layer": 12, "n_positions": 1024,
                       "vocab_size": 50257, "layer_norm_epsilon": 1e-5}, f)
        del m
        with open(args.text_file, encoding="utf-8") as f:
            text = f.read()
        lo, hi = 1, len(text)  # the longest prefix of at most --prompt tokens
        while lo < hi:
            mid = (lo + hi + 1) // 2
            n = len(json.loads(run([qkv, "encode", "--text", text[:mid]])))
            lo, hi = (mid, hi) if n <= args.prompt else (lo, mid - 1)
        text_file = os.path.join(tmp, "text.txt")
        with open(text_file, "w", encoding="utf-8") as f:
            f.write(text[:lo])
        page = os.path.join(tmp, "page.html")
        made = run([qkv, "explore", "--weights", model_dir, "--text-file", text_file, "--generate", str(args.generate),
                    "--max-page-size", str(int(args.max_mb * 1e6)), "--out", page])
        print(made.strip())
        size = os.path.getsize(page)
        rnd = random.Random(7)
        T = args.prompt + args.generate
        samples = [[rnd.randrange(12), rnd.randrange(12), rnd.randrange(T)] for _ in range(12)]
        samples += [[rnd.randrange(12), rnd.randrange(12), T - 1 - k] for k in range(4)]  # generated tokens
        js = os.path.join(tmp, "bench.cjs")
        with open(js, "w") as f:
            f.write(NODE)
        res = json.loads(run(["node", js, os.path.abspath(args.npm_dir), page, str(args.runs), os.path.join(tmp, "profile"),
                              json.dumps(samples), *( [os.path.abspath(args.shots)] if args.shots else [])]))
        ids = res["ids"]
        safetensors_io.save(os.path.join(tmp, "ids.safetensors"), {"input": torch.tensor([ids], dtype=torch.float32)})
        run([qkv, "forward", "--module", "gpt", "--weights", model_dir, "--input", os.path.join(tmp, "ids.safetensors"),
             "--attn-weights", os.path.join(tmp, "w.safetensors")])
        w = safetensors_io.load(os.path.join(tmp, "w.safetensors"))
        worst = 0.0
        for (l, h, i), row in zip(samples, res["rows"]):
            ref = w[f"trf_blocks.{l}.attn_weights"][0, h, i].double().numpy()
            worst = max(worst, float(np.max(np.abs(np.array(row) - ref))))
        print(f"tokens          {len(ids)} ({args.prompt} prompt + {args.generate} generated)")
        print(f"page            {size} bytes ({size / 1e6:.1f} MB; bound {args.max_mb:.0f} MB: {'ok' if size <= args.max_mb * 1e6 else 'OVER'})")
        print(f"open            median {median(res['open_ms'])} ms (runs: {res['open_ms']})")
        for view, v in res["switch_ms"].items():
            print(f"switch head     {view:9s} median {median(v)} ms, max {max(v)} ms ({v})")
        print(f"weights         {len(samples)} sampled rows (layer, head, query) vs qkv forward --attn-weights: "
              f"largest difference {worst:.2e}")


if __name__ == "__main__":
    main()
