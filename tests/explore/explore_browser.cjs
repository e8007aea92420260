// Drives headless chromium (playwright-core) over the pages test_explore.py made; spec.json says
// which pages, which cells and what their values must read. Prints one line per check; exits 1
// when one fails. Screenshots go to spec.shots.
const { chromium } = require(require("path").join(process.argv[2], "node_modules", "playwright-core"));
const spec = JSON.parse(require("fs").readFileSync(process.argv[3], "utf8"));
let failed = 0;
const check = (ok, what) => { console.log(`${ok ? "ok  " : "FAIL"} ${what}`); if (!ok) failed++; };

async function open(browser, file, hash) {
  const page = await browser.newPage();
  const errors = [], requests = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith("file://") && !r.url().startsWith("data:") && !r.url().startsWith("blob:")) requests.push(r.url()); });
  page.on("dialog", (d) => { errors.push("dialog: " + d.message()); d.dismiss(); });
  const t0 = Date.now();
  await page.goto("file://" + file + (hash || ""));
  await page.waitForSelector("body[data-ready='1']", { timeout: 120000 });
  return { page, errors, requests, ms: Date.now() - t0 };
}
const readout = (page) => page.$eval("#readout", (e) => e.textContent);
async function canvasPoint(page, p) { const r = await page.$eval("#view", (c) => { const b = c.getBoundingClientRect(); return { x: b.left, y: b.top }; }); return { x: r.x + p.x, y: r.y + p.y }; }
// Scrolls point p of the canvas into the window (a large page's canvas outgrows it).
async function scrollTo(page, p) {
  await page.evaluate(([x, y]) => { const b = document.getElementById("view").getBoundingClientRect(); if (b.top + y < 80 || b.top + y > innerHeight - 80) scrollBy(0, b.top + y - innerHeight / 2);
    if (b.left + x < 40 || b.left + x > innerWidth - 40) { const w = document.getElementById("wrap"); w.scrollLeft += b.left + x - innerWidth / 2; } }, [p.x, p.y]); }
async function hoverAt(page, p) { await scrollTo(page, p); const q = await canvasPoint(page, p); await page.mouse.move(q.x, q.y); return readout(page); }
async function clickAt(page, p) { await scrollTo(page, p); const q = await canvasPoint(page, p); await page.mouse.click(q.x, q.y); }
async function notBlank(page, name) {
  const png = await page.locator("#view").screenshot({ path: `${spec.shots}/${name}.png` });
  const colours = await page.evaluate(() => { const c = document.getElementById("view"), g = c.getContext("2d"); const d = g.getImageData(0, 0, c.width, c.height).data; const s = new Set(); for (let i = 0; i < d.length; i += 4 * 97) s.add(d[i] + "," + d[i + 1] + "," + d[i + 2]); return s.size; });
  check(png.length > 2000 && colours > 8, `${name}: screenshot not blank (${png.length} bytes, ${colours} colours sampled)`);
}
async function setView(page, v) { await page.click(`nav button[data-view='${v}']`); }

(async () => {
  // A fresh profile directory (playwright passes it to chromium as --user-data-dir).
  const browser = await chromium.launchPersistentContext(spec.profile, { executablePath: "/usr/bin/chromium", headless: true, viewport: { width: 1400, height: 1000 },
    args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync"] });
  const pages = spec.pages;
  for (const pg of spec.pages) {
    const { page, errors, requests, ms } = await open(browser, pg.file);
    check(true, `${pg.name}: opened and drew in ${ms} ms`);
    // a page that computes its weights (qkv explore --attention-weights computed) reads every cell
    // as the page that stores them does, within pg.weightsLike.tol; a linear layer's A is no softmax: stored
    if (pg.weightsLike) {
      const all = (p) => p.evaluate(() => { const E = window.qkvExplore, T = E.data.tokens.length, out = [];
        for (const ly of E.data.layers) { const w = E.tensor(ly.weights); if (ly.linear) continue;
          for (let h = 0; h < ly.heads; ++h) for (let i = 0; i < T; ++i) for (let j = 0; j < T; ++j) out.push(w.at(h, i, j)); }
        return { computed: E.data.computedWeights, out, linear: E.data.layers.filter((ly) => ly.linear).map((ly) => E.tensor(ly.weights).dtype) }; });
      const other = await open(browser, pages.find((q) => q.name === pg.weightsLike.page).file);
      const [mine, theirs] = [await all(page), await all(other.page)];
      let worst = 0; for (let n = 0; n < mine.out.length; ++n) worst = Math.max(worst, Math.abs(mine.out[n] - theirs.out[n]));
      check(mine.computed && !theirs.computed && mine.out.length === theirs.out.length && mine.out.length >= 98 && worst <= pg.weightsLike.tol,
            `${pg.name}: its ${mine.out.length} computed weights read as ${pg.weightsLike.page}'s stored ones within ${pg.weightsLike.tol} (largest difference ${worst.toExponential(2)})`);
      if (mine.linear.length) check(mine.linear.every((d) => d !== "computed"), `${pg.name}: its linear layers' A stored (${mine.linear})`);
      await other.page.close();
    }
    if (pg.pipelineLayer !== undefined) {
      const note = await page.evaluate((l) => { Object.assign(window.qkvExplore.state, { view: "pipeline", layer: l + 1 }); window.qkvExplore.render();
        const steps = window.qkvExplore.data.pipeline.filter((s) => s.layer >= 0).map((s) => s.layer); return { layers: [...new Set(steps)], data: window.qkvExplore.data.pipelineLayer }; }, pg.pipelineLayer);
      check(note.data === pg.pipelineLayer && note.layers.length === 1 && note.layers[0] === pg.pipelineLayer, `${pg.name}: the pipeline holds layer ${pg.pipelineLayer}'s steps only (${JSON.stringify(note)})`);
      await notBlank(page, `${pg.name}.pipeline-other-layer`);
      await page.evaluate(() => { Object.assign(window.qkvExplore.state, { layer: 0 }); window.qkvExplore.render(); });
    }
    // each layer its own heads (a Qwen3.5's Gated DeltaNet layers have other heads than its attention
    // layers): chosen in the layer selector, the head selector and the toggles offer that layer's;
    // every head of a linear layer shows its A (the hovered cell reads the page's A, and A @ values
    // is the page's context), captioned as the delta rule's map in the pipeline and the neuron view
    if (pg.layerHeads) {
      await setView(page, "pipeline");
      for (const [l, n] of pg.layerHeads.entries()) {
        await page.selectOption("#layer", String(l));
        const got = await page.evaluate(() => { const E = window.qkvExplore; return { options: document.querySelectorAll("#head option").length,
          toggles: document.querySelectorAll(".head-toggle").length, data: E.data.layers[E.state.layer].heads, linear: E.data.layers[E.state.layer].linear }; });
        check(got.options === n && got.toggles === n && got.data === n, `${pg.name}: layer ${l} (${got.linear ? "linear" : "attention"}) offers its ${n} heads (selector ${got.options}, toggles ${got.toggles}, data ${got.data})`);
        if (!got.linear) continue;
        const T = await page.evaluate(() => window.qkvExplore.data.tokens.length);
        for (let h = 0; h < n; ++h) {
          await page.selectOption("#head", String(h));
          const a = await page.evaluate(([l, h]) => { const E = window.qkvExplore, step = (end) => E.data.pipeline.find((s) => s.layer === l && s.name.endsWith(end));
            const A = E.tensor(step(".attn_weights").tensor), v = E.tensor(step(".values").tensor), c = E.tensor(step(".context").tensor);
            let worst = 0, top = 0;
            for (let i = 0; i < c.rows; ++i) for (let d = 0; d < c.cols; ++d) { let y = 0; for (let j = 0; j < c.rows; ++j) y += A.at(h, i, j) * v.at(h, j, d);
              worst = Math.max(worst, Math.abs(y - c.at(h, i, d))); top = Math.max(top, Math.abs(c.at(h, i, d))); }
            // float32 (a stored page) to rounding; float16 (a computed page's values) to its precision
            const tol = [A, v, c].every((t) => t.dtype === "f32") ? 1e-5 : 3e-3;
            return { name: step(".attn_weights").name, mats: [A.mats, v.mats, c.mats], err: worst / top, tol, cell: A.at(h, c.rows - 1, c.rows - 2).toFixed(4) }; }, [l, h]);
          const text = await hoverAt(page, await page.evaluate(([name, i]) => window.qkvExplore.cell(name, i, i - 1), [a.name, T - 1]));
          const want = `${a.name}[${h}][${T - 1}][${T - 2}] = ${a.cell}`;
          check(a.mats.every((m) => m === n) && a.err < a.tol && text.startsWith(want) && await page.evaluate(() => window.qkvExplore.state.head) === h,
                `${pg.name}: layer ${l} head ${h} shows A: '${text.split("   ")[0]}' (expected '${want}'), A @ values is the context within ${a.err.toExponential(2)} relative (< ${a.tol}), ${a.mats} matrices`);
          await page.mouse.move(1, 1);
        }
        const svg = await page.evaluate(() => window.qkvExplore.exportSVG());
        check(svg.includes(pg.linearCaption), `${pg.name}: layer ${l}'s pipeline captions A ('${pg.linearCaption}')`);
        await setView(page, "neuron");
        const nsvg = await page.evaluate(() => window.qkvExplore.exportSVG());
        check(nsvg.includes("A (delta rule)") && nsvg.includes(`head ${n - 1}, layer ${l}`), `${pg.name}: the neuron view of layer ${l} head ${n - 1} names A, not softmax`);
        await setView(page, "pipeline");
      }
      await page.evaluate(() => { Object.assign(window.qkvExplore.state, { layer: 0, head: 0 }); window.qkvExplore.render(); });
    }
    // values on hover: the pipeline's cells read as qkv prints them
    for (const c of pg.cells || []) {
      if (c.state) await page.evaluate((s) => { Object.assign(window.qkvExplore.state, s); window.qkvExplore.render(); }, c.state);
      const p = await page.evaluate(([n, i, j]) => window.qkvExplore.cell(n, i, j), [c.step, c.i, c.j]);
      const text = p ? await hoverAt(page, p) : "(no such step)";
      check(text.startsWith(c.expect), `${pg.name}: hover ${c.step}[${c.i}][${c.j}] reads '${text.split("   ")[0]}', expected '${c.expect}'`);
    }
    // every step that is not a source (the input, a parameter, a mask drawn or given) says which
    // cells it is computed from, naming steps that exist; hovering one lists them
    if (pg.sources) {
      const steps = await page.evaluate(() => window.qkvExplore.data.pipeline.map((s) => ({ name: s.name, layer: s.layer, links: s.links.map((l) => l.from.replace("{h}", "0")) })));
      const names = new Set(steps.map((s) => s.name)), isSource = (n) => pg.sources.some((r) => new RegExp(r).test(n));
      const unlinked = steps.filter((s) => !isSource(s.name) && s.links.length === 0).map((s) => s.name);
      const dangling = steps.flatMap((s) => s.links.filter((l) => !names.has(l)).map((l) => `${s.name} -> ${l}`));
      check(unlinked.length === 0 && dangling.length === 0 && steps.length > 4, `${pg.name}: every computed step links to the cells it is computed from (unlinked: ${unlinked.join(", ") || "none"}; dangling: ${dangling.join(", ") || "none"})`);
      for (const name of pg.linkHover || []) {
        await page.evaluate(() => { Object.assign(window.qkvExplore.state, { layer: 0, head: 0 }); window.qkvExplore.render(); });
        const p = await page.evaluate((n) => window.qkvExplore.cell(n, 1, 0), name);
        const text = p ? await hoverAt(page, p) : "(no such step)";
        const outlined = await page.evaluate(() => { const c = document.getElementById("view"), d = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < d.length; i += 4) if (d[i] === 0xf0 && d[i + 1] === 0xa0 && d[i + 2] === 0) ++n; return n; });
        check(text.includes("\nfrom: ") && outlined > 0, `${pg.name}: hovering ${name}[1][0] names and outlines its sources (${outlined} outline pixels; '${text.split("\n")[1] || ""}')`);
      }
      await page.mouse.move(1, 1);
    }
    // softmax of the page's softmax input, row by row, is the module's weights (qkv forward's)
    if (pg.softmax) {
      const err = await page.evaluate((c) => { const t = window.qkvExplore.tensor(window.qkvExplore.data.pipeline.find((s) => s.name === c.step).tensor);
        const [, H, T] = c.shape; let worst = 0;
        for (let h = 0; h < H; ++h) for (let i = 0; i < T; ++i) { const row = [...Array(T).keys()].map((j) => t.at(h, i, j)), m = Math.max(...row), e = row.map((x) => Math.exp(x - m)), z = e.reduce((a, b) => a + b, 0);
          for (let j = 0; j < T; ++j) worst = Math.max(worst, Math.abs(e[j] / z - c.weights[(h * T + i) * T + j])); }
        return worst; }, pg.softmax);
      check(err < 2e-6, `${pg.name}: softmax(${pg.softmax.step}) equals qkv forward's weights (largest difference ${err})`);
    }
    // -inf exactly where the causal mask hides a key (where PyTorch prints -inf), whatever the storage
    if (pg.masked) {
      const wrong = await page.evaluate((name) => { const s = window.qkvExplore.data.pipeline.find((x) => x.name === name), t = window.qkvExplore.tensor(s.tensor), out = [];
        for (let h = 0; h < t.mats; ++h) for (let i = 0; i < t.rows; ++i) for (let j = 0; j < t.cols; ++j) if ((t.at(h, i, j) === -Infinity) !== (j > i)) out.push(`[${h}][${i}][${j}]=${t.at(h, i, j)}`);
        return out; }, pg.masked);
      check(wrong.length === 0, `${pg.name}: ${pg.masked} is -inf exactly above the diagonal (${wrong.slice(0, 5).join(" ") || "so"})`);
      for (const [i, j, inf] of [[0, 1, true], [2, 3, true], [1, 0, false], [3, 3, false]]) {
        await page.evaluate(() => { Object.assign(window.qkvExplore.state, { layer: 0, head: 0 }); window.qkvExplore.render(); });
        const text = await hoverAt(page, await page.evaluate(([n, i, j]) => window.qkvExplore.cell(n, i, j), [pg.masked, i, j]));
        const v = text.split(" = ")[1]?.split(" ")[0];
        check(inf ? v === "-inf" : v !== undefined && v !== "-inf" && Number.isFinite(+v), `${pg.name}: hover ${pg.masked}[0][${i}][${j}] reads ${v}`);
      }
      await page.mouse.move(1, 1);
    }
    await notBlank(page, `${pg.name}.pipeline`);
    // head view: toggling, soloing, selecting
    await setView(page, "heads");
    check(page.url().includes("view=heads"), `${pg.name}: switching views writes the fragment (${page.url().split("#")[1]})`);
    const H = await page.evaluate(() => window.qkvExplore.data.layers[window.qkvExplore.state.layer].heads);
    if (H > 1) {
      await page.click(".head-toggle[data-head='1']");
      check(await page.evaluate(() => window.qkvExplore.state.off.includes(1)) && page.url().includes("off=1"), `${pg.name}: toggling head 1 hides it`);
      await page.click(".head-toggle[data-head='1']");
      await page.dblclick(".head-toggle[data-head='0']");
      const solo = await page.evaluate(() => [...document.querySelectorAll(".head-toggle")].map((b) => !b.classList.contains("off")));
      check(solo[0] && solo.slice(1).every((x) => !x) && page.url().includes("solo=0"), `${pg.name}: soloing head 0 shows it alone (${solo})`);
      await page.dblclick(".head-toggle[data-head='0']");
    }
    const T = await page.evaluate(() => window.qkvExplore.data.tokens.length);
    const a = await page.evaluate(() => window.qkvExplore.token("left", 1)), b = await page.evaluate((t) => window.qkvExplore.token("left", t - 1), T);
    await page.mouse.click(...Object.values(await canvasPoint(page, a))); await page.mouse.click(...Object.values(await canvasPoint(page, b)));
    await page.mouse.move(1, 1);
    const sel = await page.evaluate(() => window.qkvExplore.state.sel);
    check(sel.length === 2 && sel[0] === 1 && sel[1] === T - 1 && page.url().includes(`sel=1,${T - 1}`), `${pg.name}: selecting two tokens (${sel})`);
    await notBlank(page, `${pg.name}.heads`);
    const hv = await hoverAt(page, a);
    check(/^query 1 /.test(hv) && hv.includes("attends most to"), `${pg.name}: hovering a token sums its attention ('${hv}')`);
    // model view
    await setView(page, "model");
    const thumbs = await page.evaluate(() => window.qkvExplore.thumbs());
    const heads = thumbs.filter((t) => t.kind === "head");
    if (pg.thumbs) check(heads.length === pg.thumbs, `${pg.name}: ${heads.length} head thumbnails, expected ${pg.thumbs}`);
    check(thumbs.some((t) => t.kind === "rollout") && thumbs.some((t) => t.kind === "mean") && thumbs.some((t) => t.kind === "max"), `${pg.name}: mean, max and rollout thumbnails`);
    await notBlank(page, `${pg.name}.model`);
    const last = heads[heads.length - 1];
    await clickAt(page, last);
    const st = await page.evaluate(() => ({ ...window.qkvExplore.state }));
    check(st.view === "heads" && st.layer === last.layer && st.head === last.head, `${pg.name}: clicking thumbnail (${last.layer}, ${last.head}) opens it`);
    // neuron view
    await setView(page, "neuron");
    const nv = await hoverAt(page, await page.evaluate(() => window.qkvExplore.neuron(0, 2)));
    check(nv.startsWith("key 0 ") && nv.includes("weight ="), `${pg.name}: neuron view reads '${nv}'`);
    for (const n of pg.neuron || []) {
      await page.evaluate((s) => { Object.assign(window.qkvExplore.state, s); window.qkvExplore.render(); }, n.state);
      const r = await hoverAt(page, await page.evaluate((j) => window.qkvExplore.neuron(j, 2), n.j));
      check(r.endsWith(`weight = ${n.expect}`), `${pg.name}: neuron weight for key ${n.j} reads '${r}', expected ${n.expect}`);
    }
    // the neuron view's scaled score (from q and k, with the module's softcap and ALiBi) is the pipeline's softmax input
    if (pg.neuronLogit) {
      const T2 = await page.evaluate(() => window.qkvExplore.data.tokens.length);
      for (const [h, j] of [[0, 0], [1, 1], [1, T2 - 2], [0, T2 - 1]]) {
        await page.evaluate((s) => { Object.assign(window.qkvExplore.state, s); window.qkvExplore.render(); }, { head: h, query: T2 - 1, layer: 0 });
        const want = await page.evaluate(([n, h, i, j]) => { const s = window.qkvExplore.data.pipeline.find((x) => x.name === n); return window.qkvExplore.tensor(s.tensor).at(h, i, j).toFixed(4); }, [pg.neuronLogit, h, T2 - 1, j]);
        const r = await hoverAt(page, await page.evaluate((j) => window.qkvExplore.neuron(j, 1), j));
        check(r.includes(`scaled = ${want},`), `${pg.name}: neuron scaled score of head ${h}, key ${j} is ${pg.neuronLogit}'s ${want} ('${r}')`);
      }
    }
    await notBlank(page, `${pg.name}.neuron`);
    // the numbers on the neuron view's cells are legible: each text contrasts with its cell at 4.5:1 or more (WCAG AA)
    const contrast = await page.evaluate(() => { const svg = window.qkvExplore.exportSVG(), lum = (hex) => { const c = hex.startsWith("#") ? [1, 3, 5].map((k) => parseInt(hex.length === 4 ? hex[(k + 1) / 2].repeat(2) : hex.slice(k, k + 2), 16)) : hex.match(/\d+/g).map(Number);
        const l = c.map((x) => { x /= 255; return x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4; }); return 0.2126 * l[0] + 0.7152 * l[1] + 0.0722 * l[2]; };
      let fill = null, worst = Infinity, n = 0;
      for (const m of svg.matchAll(/<(rect|text)[^>]*?fill="([^"]+)"[^>]*>([^<]*)/g)) { if (m[1] === "rect") { fill = m[2]; continue; }
        if (!/^-?(\d+\.\d{4}|inf)$/.test(m[3]) || !fill || fill === "none") continue; const a = lum(fill), b = lum(m[2]); worst = Math.min(worst, (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)); ++n; }
      return { worst, n }; });
    check(contrast.n > 0 && contrast.worst >= 4.5, `${pg.name}: neuron view numbers contrast with their cells (${contrast.n} numbers, worst ${contrast.worst.toFixed(2)}:1)`);
    // the head-patterns table: sorting by the induction score puts the page's largest first; its
    // row reads the page's numbers; clicking it opens that head
    if (pg.patterns) {
      await setView(page, "patterns");
      await clickAt(page, await page.evaluate(() => window.qkvExplore.sortBy("induction")));
      const st = await page.evaluate(() => ({ ...window.qkvExplore.state }));
      const best = await page.evaluate(() => { let b = null; window.qkvExplore.data.layers.forEach((l, li) => l.stats.forEach((s, h) => { if (s.induction !== null && (!b || s.induction > b.v)) b = { v: s.induction, layer: li, head: h }; })); return b; });
      const first = await page.evaluate(() => window.qkvExplore.patternRow(0));
      check(best !== null && st.sort === "induction" && st.desc && first.row.layer === best.layer && first.row.head === best.head && page.url().includes("sort=induction&desc=1"),
            `${pg.name}: sorting by induction puts layer ${best && best.layer} head ${best && best.head} (${best && best.v}) first (got ${first.row.layer}, ${first.row.head})`);
      const text = await hoverAt(page, first);
      check(text.startsWith(`layer ${best.layer} head ${best.head}: `) && text.includes(`induction ${best.v.toFixed(4)}`), `${pg.name}: the row reads '${text.split("\n")[0]}'`);
      await notBlank(page, `${pg.name}.patterns`);
      await clickAt(page, first);
      const opened = await page.evaluate(() => ({ ...window.qkvExplore.state }));
      check(opened.view === "heads" && opened.layer === best.layer && opened.head === best.head, `${pg.name}: clicking the row opens layer ${best.layer} head ${best.head} (${opened.view}, ${opened.layer}, ${opened.head})`);
      await page.evaluate(() => { window.qkvExplore.state.solo = -1; window.qkvExplore.render(); });
      await setView(page, "neuron");
    }
    // generated tokens: the ids are qkv generate's, marked in the query list and drawn apart in
    // the heads view; the lens's last row at each generated step predicts the token that came next
    if (pg.generated) {
      const d = await page.evaluate(() => ({ ids: window.qkvExplore.data.ids, from: window.qkvExplore.data.generatedFrom, opts: [...document.querySelectorAll("#query option")].map((o) => o.textContent) }));
      check(JSON.stringify(d.ids) === JSON.stringify(pg.generated.ids) && d.from === pg.generated.from, `${pg.name}: the page's ids are qkv generate's (${d.ids}) from ${d.from}`);
      const marked = d.opts.map((t) => t.endsWith("(generated)")), want = d.ids.map((_, i) => i >= pg.generated.from);
      check(JSON.stringify(marked) === JSON.stringify(want), `${pg.name}: exactly the generated tokens are marked in the query list (${marked})`);
      await setView(page, "heads");
      const green = await page.evaluate(() => { const c = document.getElementById("view"), px = c.getContext("2d").getImageData(0, 0, c.width, c.height).data; let n = 0; for (let i = 0; i < px.length; i += 4) if (px[i] === 0x0a && px[i + 1] === 0x7d && px[i + 2] === 0x32) ++n; return n; });
      check(green > 20, `${pg.name}: the heads view draws generated tokens in their colour (${green} pixels)`);
      await setView(page, "lens");
      const R = await page.evaluate(() => window.qkvExplore.data.lens.rows.length), T = d.ids.length;
      for (let t = pg.generated.from - 1; t < T - 1; ++t) {
        const r = await hoverAt(page, await page.evaluate(([t, r]) => window.qkvExplore.lensCell(t, r), [t, R - 1]));
        const next = await page.evaluate((t) => window.qkvExplore.data.tokens[t + 1], t);
        check(r.startsWith(`position ${t} `) && r.includes(`block ${R - 2} through final_norm and out_head: "${next}" `), `${pg.name}: the lens's last row at position ${t} predicts the next token "${next}" ('${r.split("\n")[0]}')`);
      }
      await notBlank(page, `${pg.name}.lens`);
      await setView(page, "neuron");
    }
    // export
    const svg = await page.evaluate(() => window.qkvExplore.exportSVG()), png = await page.evaluate(() => window.qkvExplore.exportPNG());
    check(svg.startsWith("<svg") && svg.length > 1000 && png.startsWith("data:image/png;base64,") && png.length > 1000, `${pg.name}: PNG and SVG export (${png.length}, ${svg.length} chars)`);
    // the fragment reopens the same view
    const url = page.url(), before = await page.evaluate(() => ({ ...window.qkvExplore.state }));
    const again = await open(browser, pg.file, "#" + url.split("#")[1]);
    const st2 = await again.page.evaluate(() => ({ ...window.qkvExplore.state }));
    check(st2.view === "neuron" && JSON.stringify(st2.sel) === JSON.stringify(sel) && st2.layer === before.layer && st2.head === before.head && st2.query === before.query && st2.solo === before.solo, `${pg.name}: the fragment reopens the view (${url.split("#")[1]})`);
    if (pg.title) check((await page.$eval("#title", (e) => e.textContent)).includes(pg.title), `${pg.name}: the title shows the label as text`);
    await again.page.close();
    check(errors.length === 0, `${pg.name}: no console error (${errors.join(" | ")})`);
    check(requests.length === 0, `${pg.name}: no network request (${requests.join(" ")})`);
    const hostile = await page.evaluate(() => window.__pwned === undefined && document.querySelectorAll("img").length === 0);
    check(hostile, `${pg.name}: nothing injected ran or rendered`);
    await page.close();
  }
  await browser.close();
  console.log(failed ? `${failed} check(s) failed` : "all checks passed");
  process.exit(failed ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
