#!/usr/bin/env node
// llama.cpp as an oracle, through npm's node-llama-cpp (pinned 3.22.1, its prebuilt CPU binaries):
// a GGUF file's greedy continuation of given token ids, its logits, and its speed.
//
//   node greedy.mjs FILE.gguf --ids 1,2,3 [--new 8] [--logits] [--threads 2] [--kv-type f32|f16] [--json]
//   node greedy.mjs FILE.gguf [--ids ...] --bench-prefill N [--bench-decode N] [--threads 2]
//   node greedy.mjs --serve [--threads 1] [--kv-type f32|f16]
//
// Evaluates exactly the ids given (no BOS added, no text tokenized), then --new times takes the argmax
// of the last position's raw logits (no penalties, no sampling; the first index among equal maxima) and
// evaluates it. Prints one JSON line on stdout:
//   {"ids": [new ids], "logits": [the prompt's last-position logits, all V]}   (logits with --logits)
//   {"prefill": {"tokens", "seconds", "tokens_per_s"}, "decode": {...}, "cpu_variant": V}  (the bench modes)
// Bench prefill evaluates N ids (the --ids repeated, or 0..255 repeated) in one call; bench decode, after the
// prompt (--ids, or one id), N single-token steps picked by llama.cpp's greedy sampler, timed
// without the prompt; cpu_variant names the CPU backend llama.cpp loaded (the libggml-cpu-V.so of the
// prebuilt binaries' folder with the best score for this CPU, e.g. "zen4" or "haswell"). CPU only (gpu: false, build: "never": nothing is downloaded or compiled).
// The KV cache is F32 by default (an oracle for float32 twins); --kv-type f16 is llama.cpp's default.
// --serve loads llama.cpp once (its start takes about 1.5 s, more than a small model's whole run) and
// answers jobs, one JSON object a line on stdin, {"file": F, "ids": [...], "new": N, "logits": true},
// with one JSON line each on stdout: the greedy mode's object, or {"error": message} when that job
// fails (the next job still runs); it ends at the end of stdin.
// node-llama-cpp is imported from $QKV_NPM_DIR/node_modules when QKV_NPM_DIR is set, else as usual.
// Exit status 2 on bad arguments, 1 when llama.cpp fails (the message on stderr).

import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

function usage(message) {
    process.stderr.write(`greedy.mjs: ${message}\n` +
        "usage: node greedy.mjs FILE.gguf --ids 1,2,3 [--new 8] [--logits] [--threads N] [--kv-type f32|f16]\n" +
        "       [--bench-prefill N] [--bench-decode N] [--json]\n" +
        "       node greedy.mjs --serve [--threads N] [--kv-type f32|f16]   (jobs as JSON lines on stdin)\n");
    process.exit(2);
}

function parseArgs(argv) {
    const a = {file: null, ids: null, newTokens: 8, logits: false, threads: 2, kvType: "f32",
               benchPrefill: 0, benchDecode: 0, serve: false};
    const count = (name, v) => {
        if (!/^\d+$/.test(v ?? "")) usage(`${name} wants a count, got ${v}`);
        return Number(v);
    };
    for (let i = 0; i < argv.length; i++) {
        const k = argv[i];
        if (k === "--ids") {
            const v = argv[++i] ?? "";
            if (!/^\d+(,\d+)*$/.test(v)) usage(`--ids wants comma-separated token ids, got ${v}`);
            a.ids = v.split(",").map(Number);
        } else if (k === "--new") a.newTokens = count(k, argv[++i]);
        else if (k === "--threads") a.threads = count(k, argv[++i]);
        else if (k === "--bench-prefill") a.benchPrefill = count(k, argv[++i]);
        else if (k === "--bench-decode") a.benchDecode = count(k, argv[++i]);
        else if (k === "--kv-type") {
            a.kvType = argv[++i];
            if (a.kvType !== "f32" && a.kvType !== "f16") usage(`--kv-type is f32 or f16, got ${a.kvType}`);
        } else if (k === "--logits") a.logits = true;
        else if (k === "--serve") a.serve = true;
        else if (k === "--json") { /* the output is always JSON */ }
        else if (k.startsWith("--")) usage(`unknown option ${k}`);
        else if (a.file === null) a.file = k;
        else usage(`a second file ${k}`);
    }
    if (a.serve) {
        if (a.file !== null || a.ids !== null || a.benchPrefill > 0 || a.benchDecode > 0)
            usage("--serve takes its files and ids as jobs on stdin");
        return {...a, bench: false};
    }
    if (a.file === null) usage("no GGUF file");
    const bench = a.benchPrefill > 0 || a.benchDecode > 0;
    if (!bench && (a.ids === null || a.ids.length === 0)) usage("no --ids");
    return {...a, bench};
}

async function importNodeLlamaCpp() {
    const dir = process.env.QKV_NPM_DIR;
    if (!dir) return import("node-llama-cpp");
    const entry = path.join(path.resolve(dir), "node_modules", "node-llama-cpp", "dist", "index.js");
    return import(pathToFileURL(entry).href);
}

// Evaluates `tokens` at the sequence's end; the raw logits llama.cpp computed at the last one, as an
// array indexed by token id (all of the vocabulary: node-llama-cpp gives them as a Map).
async function evaluateWithLogits(sequence, tokens) {
    const input = tokens.map((t, i) => i === tokens.length - 1 ? [t, {generateNext: {logits: true}}] : t);
    const out = await sequence.controlledEvaluate(input);
    const map = out[tokens.length - 1]?.next?.logits;
    if (map === undefined) throw new Error("llama.cpp returned no logits");
    const logits = new Array(map.size).fill(null);
    for (const [t, v] of map) logits[t] = v;
    if (logits.length !== map.size || logits.some((v) => v === null)) throw new Error("logits not for ids 0..V-1");
    return logits;
}

function argmax(xs) {
    let best = 0;
    for (let i = 1; i < xs.length; i++) if (xs[i] > xs[best]) best = i;
    return best;
}

async function startLlama(threads) {
    const {getLlama, LlamaLogLevel} = await importNodeLlamaCpp();
    return getLlama({
        gpu: false, build: "never", usePrebuiltBinaries: true, skipDownload: true, progressLogs: false,
        maxThreads: threads, logLevel: LlamaLogLevel.error,
        logger: (level, message) => process.stderr.write(message.endsWith("\n") ? message : message + "\n"),
    });
}

// One file's run (the greedy mode or the bench modes, as parsed from the arguments or a job): its
// JSON object.
async function run(llama, args) {
    const model = await llama.loadModel({modelPath: path.resolve(args.file), gpuLayers: 0,
                                         ignoreMemorySafetyChecks: true});
    const ids = args.ids ?? [0];
    const needed = args.bench
        ? Math.max(args.benchPrefill, ids.length + args.benchDecode) + 1
        : ids.length + args.newTokens + 1;
    const kv = args.kvType === "f32" ? "F32" : "F16";
    let context = null;
    try {
        context = await model.createContext({
            contextSize: needed, batchSize: Math.max(needed, 1), sequences: 1, threads: args.threads,
            flashAttention: false, experimentalKvCacheKeyType: kv, experimentalKvCacheValueType: kv,
            ignoreMemorySafetyChecks: true,
        });
        return args.bench ? await bench(context.getSequence(), args, ids)
                          : await greedy(context.getSequence(), args, ids);
    } finally {
        if (context !== null) await context.dispose();
        await model.dispose();
    }
}

async function greedy(sequence, args, ids) {
    const result = {};
    let logits = await evaluateWithLogits(sequence, ids);
    if (args.logits) result.logits = logits;
    const out = [];
    for (let step = 0; step < args.newTokens; step++) {
        const next = argmax(logits);
        out.push(next);
        if (step + 1 < args.newTokens) logits = await evaluateWithLogits(sequence, [next]);
    }
    result.ids = out;
    return result;
}

async function bench(sequence, args, ids) {
    const result = {};
    await evaluateWithLogits(sequence, [ids[0]]);  // warm up
    await sequence.clearHistory();
    if (args.benchPrefill > 0) {
        const prompt = Array.from({length: args.benchPrefill}, (_, i) => args.ids ? ids[i % ids.length] : i % 256);
        const t0 = process.hrtime.bigint();
        await sequence.controlledEvaluate(prompt.map((t, i) =>
            i === prompt.length - 1 ? [t, {generateNext: {token: true, options: {temperature: 0}}}] : t));
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        result.prefill = {tokens: args.benchPrefill, seconds: s, tokens_per_s: args.benchPrefill / s};
        await sequence.clearHistory();
    }
    if (args.benchDecode > 0) {
        const greedyStep = (t) => [t, {generateNext: {token: true, options: {temperature: 0}}}];
        let out = await sequence.controlledEvaluate(ids.map((t, i) => i === ids.length - 1 ? greedyStep(t) : t));
        let next = out[ids.length - 1].next.token;
        const t0 = process.hrtime.bigint();
        for (let step = 0; step < args.benchDecode; step++) {
            out = await sequence.controlledEvaluate([greedyStep(next)]);
            next = out[0].next.token;
        }
        const s = Number(process.hrtime.bigint() - t0) / 1e9;
        result.decode = {tokens: args.benchDecode, seconds: s, tokens_per_s: args.benchDecode / s,
                         threads: args.threads};
    }
    result.cpu_variant = loadedCpuVariant();
    return result;
}

// The CPU backend this process mapped (ggml loads one libggml-cpu-V.so, the best for the CPU among
// those in the binaries' folder), or null when none is found.
function loadedCpuVariant() {
    const maps = fs.readFileSync("/proc/self/maps", "utf8");
    const m = maps.match(/libggml-cpu-([A-Za-z0-9_]+)\.so/);
    return m ? m[1] : null;
}

// A job line of --serve as the greedy mode's arguments; throws on a malformed job.
function parseJob(line, defaults) {
    const job = JSON.parse(line);
    const ids = job.ids;
    if (typeof job.file !== "string") throw new Error(`a job wants "file" (a path), got ${JSON.stringify(job.file)}`);
    if (!Array.isArray(ids) || ids.length === 0 || !ids.every((t) => Number.isInteger(t) && t >= 0))
        throw new Error(`a job wants "ids" (token ids), got ${JSON.stringify(ids)}`);
    const n = job.new ?? defaults.newTokens;
    if (!Number.isInteger(n) || n < 0) throw new Error(`a job's "new" is a count, got ${JSON.stringify(n)}`);
    return {...defaults, file: job.file, ids, newTokens: n, logits: job.logits === true, bench: false};
}

async function serve(llama, defaults) {
    const readline = await import("node:readline");
    const lines = readline.createInterface({input: process.stdin, crlfDelay: Infinity});
    for await (const line of lines) {
        if (line.trim() === "") continue;
        let reply;
        try {
            reply = await run(llama, parseJob(line, defaults));
        } catch (e) {
            reply = {error: String(e?.message ?? e)};
        }
        process.stdout.write(JSON.stringify(reply) + "\n");
    }
}

async function main() {
    const args = parseArgs(process.argv.slice(2));
    const llama = await startLlama(args.threads);
    if (args.serve) await serve(llama, args);
    else process.stdout.write(JSON.stringify(await run(llama, args)) + "\n");
    await llama.dispose();
}

main().catch((e) => {
    process.stderr.write(`greedy.mjs: ${e?.stack ?? e}\n`);
    process.exit(1);
});
