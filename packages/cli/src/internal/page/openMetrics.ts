/**
 * The OpenMetrics text format (https://prometheus.io/docs/specs/om/open_metrics_spec/): metric
 * families with their type and help, samples with escaped label values, `# EOF` last; and the
 * Prometheus text format (0.0.4) of the same families, for a scraper that does not ask for
 * OpenMetrics (a counter's family is then named with its `_total`, and there is no `# EOF`).
 * What the page's `/metrics` serves: gauges read from the database at the scrape, and this
 * process's Effect metrics (`Metric.snapshot`: counters, gauges, histograms, frequencies,
 * summaries).
 */
import type * as Metric from "effect/Metric"

export const CONTENT_TYPES = {
  openmetrics: "application/openmetrics-text; version=1.0.0; charset=utf-8",
  prometheus: "text/plain; version=0.0.4; charset=utf-8"
} as const

export type Format = keyof typeof CONTENT_TYPES

/** OpenMetrics when the scraper accepts it (Prometheus asks for it first), else the Prometheus text format. */
export const negotiate = (accept: string | undefined): Format =>
  (accept ?? "").split(",").some((range) =>
      /^\s*application\/openmetrics-text\b/i.test(range) && !/;\s*q\s*=\s*0(?:\.0*)?\s*(?:;|$)/i.test(range)
    )
    ? "openmetrics"
    : "prometheus"

export type Labels = Readonly<Record<string, string>>

export interface Sample {
  /** Appended to the family's name (`_total`, `_bucket`, `_count`, `_sum`); default none. */
  readonly suffix?: string
  readonly labels: Labels
  readonly value: number
}

export interface Family {
  readonly name: string
  readonly type: "counter" | "gauge" | "histogram" | "summary" | "unknown"
  readonly help: string
  readonly samples: ReadonlyArray<Sample>
}

/** A metric or label name as the format allows it: anything else becomes `_`. */
export const metricName = (name: string) => name.replace(/[^a-zA-Z0-9_:]/g, "_").replace(/^([0-9])/, "_$1")
const labelName = (name: string) => name.replace(/[^a-zA-Z0-9_]/g, "_").replace(/^([0-9])/, "_$1")

/** Labels the format gives a meaning (`le`, `quantile`) or reserves (`__`): an attribute of that name is renamed. */
const RESERVED_LABEL = /^(?:le|quantile|__.*)$/

/** An attribute set as labels: names sanitised, reserved ones renamed `exported_<name>`, the first of a clash kept. */
export const labelsOf = (attributes: Readonly<Record<string, string>>): Labels => {
  const labels: Record<string, string> = {}
  for (const [key, value] of Object.entries(attributes)) {
    const name = labelName(key)
    const safe = RESERVED_LABEL.test(name) ? `exported_${name.replace(/^_+/, "")}` : name
    if (!(safe in labels)) labels[safe] = value
  }
  return labels
}

const escapeValue = (value: string) => value.replace(/\\/g, "\\\\").replace(/"/g, "\\\"").replace(/\n/g, "\\n")
/** HELP text: OpenMetrics escapes `"` too; Prometheus's 0.0.4 only `\\` and the line feed. */
const escapeHelp = (help: string, as: Format) =>
  as === "openmetrics" ? escapeValue(help) : help.replace(/\\/g, "\\\\").replace(/\n/g, "\\n")

const number = (value: number) =>
  Number.isNaN(value) ? "NaN" : value === Infinity ? "+Inf" : value === -Infinity ? "-Inf" : String(value)

const sampleLine = (name: string, sample: Sample) => {
  const labels = Object.entries(sample.labels)
  const text = labels.length === 0
    ? ""
    : `{${labels.map(([key, value]) => `${key}="${escapeValue(value)}"`).join(",")}}`
  return `${name}${sample.suffix ?? ""}${text} ${number(sample.value)}`
}

/**
 * The families as one exposition. Families of one name and type are merged (the first one's
 * help); a family whose name or samples' names another family already took (another type, or
 * a counter `x` beside a gauge `x_total`) is left out: the format cannot hold both.
 */
export const format = (families: ReadonlyArray<Family>, as: Format): string => {
  const merged = new Map<string, Family>()
  for (const family of families) {
    const name = metricName(family.name)
    const known = merged.get(name)
    if (known === undefined) merged.set(name, { ...family, name })
    else if (known.type === family.type) merged.set(name, { ...known, samples: [...known.samples, ...family.samples] })
  }
  const lines: Array<string> = []
  const taken = new Set<string>()
  for (const family of merged.values()) {
    // Prometheus names a counter's family as its samples are named; OpenMetrics without the `_total`.
    const name = as === "prometheus" && family.type === "counter" ? `${family.name}_total` : family.name
    const names = [name, ...family.samples.map((sample) => `${family.name}${sample.suffix ?? ""}`)]
    if (names.some((taker) => taken.has(taker))) continue
    for (const taker of names) taken.add(taker)
    // (No HELP line for no help: a parser may read `# HELP name` alone as a broken line.)
    if (family.help.trim() !== "") lines.push(`# HELP ${name} ${escapeHelp(family.help, as)}`)
    lines.push(`# TYPE ${name} ${as === "prometheus" && family.type === "unknown" ? "untyped" : family.type}`)
    for (const sample of family.samples) lines.push(sampleLine(family.name, sample))
  }
  if (as === "openmetrics") lines.push("# EOF")
  return `${lines.join("\n")}\n`
}

/** A histogram's or summary's last two samples. */
const countAndSum = (labels: Labels, count: number, sum: number): ReadonlyArray<Sample> => [
  { suffix: "_count", labels, value: count },
  { suffix: "_sum", labels, value: sum }
]

const attributesOf = (snapshot: Metric.Metric.Snapshot): Labels =>
  labelsOf(Object.fromEntries(Object.entries(snapshot.attributes ?? {}).map(([key, value]) => [key, String(value)])))

/**
 * This process's Effect metrics as families. A counter's family drops a trailing `_total` from
 * its name (OpenMetrics puts it on the sample); a frequency is a counter by its key.
 */
export const fromSnapshots = (snapshots: ReadonlyArray<Metric.Metric.Snapshot>): ReadonlyArray<Family> =>
  snapshots.flatMap((snapshot): ReadonlyArray<Family> => {
    const labels = attributesOf(snapshot)
    const help = snapshot.description || snapshot.id
    switch (snapshot.type) {
      case "Counter":
        return [{
          name: snapshot.id.replace(/_total$/, ""),
          type: "counter",
          help,
          samples: [{ suffix: "_total", labels, value: Number(snapshot.state.count) }]
        }]
      case "Gauge":
        return [{ name: snapshot.id, type: "gauge", help, samples: [{ labels, value: Number(snapshot.state.value) }] }]
      case "Frequency":
        return [{
          name: snapshot.id.replace(/_total$/, ""),
          type: "counter",
          help,
          samples: Array.from(
            snapshot.state.occurrences,
            ([key, count]) => ({ suffix: "_total", labels: { ...labels, key }, value: count })
          )
        }]
      case "Histogram": {
        const { buckets, count, sum } = snapshot.state
        return [{
          name: snapshot.id,
          type: "histogram",
          help,
          samples: [
            ...buckets.map(([le, n]) => ({ suffix: "_bucket", labels: { ...labels, le: number(le) }, value: n })),
            ...(buckets.some(([le]) => le === Infinity)
              ? []
              : [{ suffix: "_bucket", labels: { ...labels, le: "+Inf" }, value: count }]),
            ...countAndSum(labels, count, sum)
          ]
        }]
      }
      case "Summary": {
        const { count, quantiles, sum } = snapshot.state
        return [{
          name: snapshot.id,
          type: "summary",
          help,
          samples: [
            ...quantiles.flatMap(([quantile, value]) =>
              value === undefined ? [] : [{ labels: { ...labels, quantile: String(quantile) }, value }]
            ),
            ...countAndSum(labels, count, sum)
          ]
        }]
      }
    }
  })
