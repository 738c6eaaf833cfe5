// One drain in its own process, so each contender starts from a fresh heap and its peak RSS
// is its own: `drainWorker.ts <contender> <url> <count>` prints one JSON line.
import { load } from "./contenders/load.js"

const [name, url, count] = process.argv.slice(2)
const contender = await load(name!)
const started = performance.now()
await contender.drain(url!, Number(count))
const seconds = (performance.now() - started) / 1000
// ru_maxrss: the process's peak resident set, in KiB on Linux.
process.stdout.write(`${JSON.stringify({ seconds, peakRssMB: Math.round(process.resourceUsage().maxRSS / 1024) })}\n`)
