/**
 * HTML built from tagged templates: every interpolated value is escaped unless it is already
 * `Html` (built here), so no message topic, error text or payload can inject markup.
 */
export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

type Part = Html | string | number | boolean | null | undefined | ReadonlyArray<Part>

const ESCAPES: Readonly<Record<string, string>> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;" }

export const escape = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!)

const render = (part: Part): string =>
  part instanceof Html
    ? part.value
    : Array.isArray(part)
    ? part.map(render).join("")
    : part === null || part === undefined || part === false || part === true
    ? ""
    : escape(String(part))

export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Part>): Html =>
  new Html(strings.reduce((out, text, i) => out + text + (i < values.length ? render(values[i] as Part) : ""), ""))

/** Markup made here from trusted pieces (numbers, our own SVG). */
export const raw = (text: string): Html => new Html(text)
