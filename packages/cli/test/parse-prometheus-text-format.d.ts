// The npm parser of Prometheus's text format ships no types: what the metrics test reads of it.
declare module "parse-prometheus-text-format" {
  const parse: (text: string) => ReadonlyArray<{
    readonly name: string
    readonly help: string
    readonly type: string
    readonly metrics: ReadonlyArray<Record<string, unknown>>
  }>
  export default parse
}
