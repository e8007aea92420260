#!/usr/bin/env python3
"""qkv explore at scale: the page for T = 1,024 tokens of a 12-head, 4-layer attention LM, its size,
and its open-and-draw time in headless chromium (median of --runs). A benchmark, not a test.

  /usr/bin/python3 bench/explore_bench.py --qkv build/qkv --npm-dir build/npm [--layers 4 --runs 5]

Trains the model for one step on a text file (its weights do not matter for the timing), writes
the page with `qkv explore --checkpoint`, then times page.goto() until the page has drawn its
first view, and the switch to each other view.
"""
import argparse, os, subprocess, sys, tempfile, json

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "explore"))
from test_explore import ensure_packages  # noqa: E402

NODE = r"""
const { chromium } = require(require("path").join(process.argv[2], "node_modules", "playwright-core"));
(async () => {
  const file = process.argv[3], runs = +process.argv[4], out = [];
  const ctx = await chromium.launchPersistentContext(process.argv[5], { executablePath: "/usr/bin/chromium", headless: true,
    viewport: { width: 1400, height: 1000 }, args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  for (let r = 0; r < runs; ++r) {
    const page = await ctx.newPage(), t0 = Date.now();
    await page.goto("file://" + file); await page.waitForSelector("body[data-ready='1']", { timeout: 600000 });
    const row = { open_ms: Date.now() - t0 };
    for (const v of ["heads", "model", "neuron", "pipeline"]) { const t = Date.now(); await page.click(`nav button[data-view='${v}']`);
      await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => r()))); row[v + "_ms"] = Date.now() - t; }
    out.push(row); await page.close();
  }
  await ctx.close(); console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--qkv", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--tokens", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--text-file", default="/usr/share/common-licenses/GPL-3")
    args = ap.parse_args()
    ensure_packages(args.npm_dir)
    qkv = os.path.abspath(args.qkv)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = os.path.join(tmp, "lm.safetensors")
        subprocess.run([qkv, "train", "--text-file", args.text_file, "--steps", "1", "--batch-size", "1",
                        "--context-length", str(args.tokens), "--num-heads", str(args.heads), "--num-layers",
                        str(args.layers), "--d-model", str(args.d_model), "--checkpoint", ckpt],
                       check=True, cwd=tmp, stdout=subprocess.DEVNULL)
        with open(args.text_file, encoding="utf-8") as f:
            text = f.read()
        # enough text for the tokens: qkv explore refuses more than the context, so cut by words until it fits
        words = text.split(" ")
        lo, hi = 1, len(words)
        page = os.path.join(tmp, "page.html")
        while lo < hi:  # the longest prefix that fits the context
            mid = (lo + hi + 1) // 2
            r = subprocess.run([qkv, "explore", "--checkpoint", ckpt, "--text", " ".join(words[:mid]), "--out", page],
                               capture_output=True, text=True)
            lo, hi = (mid, hi) if r.returncode == 0 else (lo, mid - 1)
        r = subprocess.run([qkv, "explore", "--checkpoint", ckpt, "--text", " ".join(words[:lo]), "--out", page],
                           capture_output=True, text=True, check=True)
        print(r.stdout.strip())
        js = os.path.join(tmp, "bench.cjs")
        with open(js, "w") as f:
            f.write(NODE)
        res = subprocess.run(["node", js, os.path.abspath(args.npm_dir), page, str(args.runs), os.path.join(tmp, "profile")],
                             capture_output=True, text=True, check=True)
        rows = json.loads(res.stdout)
        for k in rows[0]:
            v = sorted(r[k] for r in rows)
            print(f"{k:12s} median {v[len(v) // 2]} ms  (min {v[0]}, max {v[-1]}, {len(v)} runs)")


if __name__ == "__main__":
    main()
