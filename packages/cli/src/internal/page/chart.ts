/**
 * A topic's last minutes as a small SVG drawn here (no script, no library): bars of messages
 * delivered per interval and lines of the ready and dead counts above, the longest delivery
 * lag per interval below. Deliveries and lag come from the outbox itself; ready and dead
 * counts from the samples this page took while it was open.
 */
import type * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import { escape } from "./html.js"

export interface Sample {
  /** Epoch milliseconds. */
  readonly at: number
  readonly ready: number
  readonly dead: number
}

const WIDTH = 320
const COUNTS = { top: 14, bottom: 66 }
const LAG = { top: 80, bottom: 106 }
const HEIGHT = 112

const fmt = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1))
const round = (n: number) => Math.round(n * 10) / 10

/** The SVG markup (attributes only: it passes a strict Content-Security-Policy). */
export const topicChart = (
  topic: string,
  buckets: ReadonlyArray<OutboxSearch.HistoryBucket>,
  samples: ReadonlyArray<Sample>
): string => {
  if (buckets.length === 0) return ""
  const end = Date.parse(buckets[buckets.length - 1]!.at)
  const step = buckets.length > 1 ? end - Date.parse(buckets[buckets.length - 2]!.at) : 60_000
  const start = end - step * buckets.length
  const x = (t: number) => round(((t - start) / (end - start)) * WIDTH)
  const inWindow = samples.filter((s) => s.at >= start && s.at <= end + step)
  const countMax = Math.max(1, ...buckets.map((b) => b.delivered), ...inWindow.map((s) => Math.max(s.ready, s.dead)))
  const yCount = (n: number) => round(COUNTS.bottom - (n / countMax) * (COUNTS.bottom - COUNTS.top))
  const lagMax = Math.max(0, ...buckets.map((b) => b.maxLagSeconds ?? 0))
  const yLag = (s: number) => round(LAG.bottom - (lagMax === 0 ? 0 : (s / lagMax) * (LAG.bottom - LAG.top)))
  const barWidth = Math.max(1, round(WIDTH / buckets.length - 1))

  const bars = buckets.map((b) => {
    const left = x(Date.parse(b.at) - step)
    const y = yCount(b.delivered)
    return b.delivered === 0
      ? ""
      : `<rect class="delivered" x="${left}" y="${y}" width="${barWidth}" height="${
        round(COUNTS.bottom - y)
      }"><title>${b.delivered} delivered</title></rect>`
  }).join("")
  const died = buckets.map((b) =>
    b.died === 0
      ? ""
      : `<rect class="died" x="${x(Date.parse(b.at) - step)}" y="${
        COUNTS.bottom + 1
      }" width="${barWidth}" height="3"><title>${b.died} died</title></rect>`
  ).join("")
  const line = (cls: string, points: ReadonlyArray<readonly [number, number]>) =>
    points.length === 0
      ? ""
      : points.length === 1
      ? `<circle class="${cls}" cx="${points[0]![0]}" cy="${points[0]![1]}" r="2"/>`
      : `<polyline class="${cls}" points="${points.map(([px, py]) => `${px},${py}`).join(" ")}"/>`
  const ready = line("ready", inWindow.map((s) => [x(Math.min(s.at, end)), yCount(s.ready)] as const))
  const dead = line("dead", inWindow.map((s) => [x(Math.min(s.at, end)), yCount(s.dead)] as const))
  const lag = line(
    "lag",
    buckets.filter((b) => b.maxLagSeconds !== null).map((b) =>
      [x(Date.parse(b.at) - step / 2), yLag(b.maxLagSeconds!)] as const
    )
  )
  const minutes = Math.round((end - start) / 60_000)
  const label = `${topic}: last ${minutes} minutes; up to ${fmt(countMax)} per interval; longest lag ${fmt(lagMax)} s`
  return `<svg class="chart" viewBox="0 0 ${WIDTH} ${HEIGHT}" width="${WIDTH}" height="${HEIGHT}" role="img" aria-label="${
    escape(label)
  }">` +
    `<title>${escape(label)}</title>` +
    `<text class="axis" x="0" y="9">${fmt(countMax)}</text>` +
    `<text class="axis" x="${WIDTH}" y="9" text-anchor="end">${minutes} min</text>` +
    `<line class="base" x1="0" y1="${COUNTS.bottom}" x2="${WIDTH}" y2="${COUNTS.bottom}"/>` +
    bars + died + ready + dead +
    `<text class="axis" x="0" y="${LAG.top - 2}">lag ${fmt(lagMax)} s</text>` +
    `<line class="base" x1="0" y1="${LAG.bottom}" x2="${WIDTH}" y2="${LAG.bottom}"/>` +
    lag +
    `</svg>`
}

/** How often a topic's counts are sampled for its chart, and how long samples are kept. */
const SAMPLE_EVERY = 4_000
const SAMPLE_KEEP = 15 * 60_000

/** The samples with the topics' counts of `now` added (one per topic every few seconds), old ones dropped. */
export const withSamples = (
  map: ReadonlyMap<string, ReadonlyArray<Sample>>,
  topics: ReadonlyArray<{ readonly topic: string; readonly ready: number; readonly dead: number }>,
  now: number
): Map<string, ReadonlyArray<Sample>> => {
  const next = new Map(map)
  for (const t of topics) {
    const series = (next.get(t.topic) ?? []).filter((s) => now - s.at <= SAMPLE_KEEP)
    const last = series[series.length - 1]
    if (last === undefined || now - last.at >= SAMPLE_EVERY) {
      next.set(t.topic, [...series, { at: now, ready: t.ready, dead: t.dead }])
    }
  }
  return next
}
