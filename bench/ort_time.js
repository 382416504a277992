// Times ONNX Runtime (npm onnxruntime-node, CPU provider, all graph optimisations) on one model for
// bench/compare_runtimes.py: node ort_time.js MODEL.onnx INPUTS.json THREADS RUNS OUT.bin
// INPUTS.json lists {name, dtype ("int64" | "float32"), shape, file (raw little-endian data)}.
// Prints {"ms": [each run after one warm-up]} and writes the first output's f32 data to OUT.bin.
const fs = require("fs");
const ort = require("onnxruntime-node");

async function main() {
  const [model, inputsJson, threads, runs, outBin] = process.argv.slice(2);
  const session = await ort.InferenceSession.create(model, {
    executionProviders: ["cpu"],
    graphOptimizationLevel: "all",
    intraOpNumThreads: Number(threads),
    interOpNumThreads: 1,
  });
  const feeds = {};
  for (const x of JSON.parse(fs.readFileSync(inputsJson, "utf8"))) {
    const buf = fs.readFileSync(x.file);
    const ab = buf.buffer.slice(buf.byteOffset, buf.byteOffset + buf.byteLength);
    const data = x.dtype === "int64" ? new BigInt64Array(ab) : new Float32Array(ab);
    feeds[x.name] = new ort.Tensor(x.dtype, data, x.shape);
  }
  let out = await session.run(feeds);  // warm-up
  const ms = [];
  for (let i = 0; i < Number(runs); ++i) {
    const t0 = process.hrtime.bigint();
    out = await session.run(feeds);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const first = out[session.outputNames[0]];
  fs.writeFileSync(outBin, Buffer.from(first.data.buffer, first.data.byteOffset, first.data.byteLength));
  console.log(JSON.stringify({ ms, output: session.outputNames[0], shape: first.dims }));
}
main().catch((e) => { console.error(e); process.exit(1); });
