/**
 * HTML built from tagged templates: every interpolated value is escaped unless it is already
 * `Html` (built here), so no message topic, error text or payload can inject markup; in text,
 * invisible control characters (bidi overrides) are marked, so none reorders what is read.
 */
import { codePointOf, INVISIBLE } from "@effect-durable/core/Printable"

export class Html {
  constructor(readonly value: string) {}
  toString(): string {
    return this.value
  }
}

type Part = Html | string | number | boolean | null | undefined | ReadonlyArray<Part>

const ESCAPES: Readonly<Record<string, string>> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  "\"": "&quot;",
  "'": "&#39;"
}

export const escape = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!)

/**
 * Text shown on the page: escaped, and every invisible control character (a bidi override
 * that reorders what is read, an escape character) marked where it is, by its code point.
 */
export const shown = (text: string): string =>
  escape(text).replace(
    INVISIBLE,
    (c) => `<mark class="control" title="an invisible control character">${codePointOf(c)}</mark>`
  )

const render = (part: Part, inAttribute: boolean): string =>
  part instanceof Html
    ? part.value
    : Array.isArray(part)
    ? part.map((p) => render(p, inAttribute)).join("")
    : part === null || part === undefined || part === false || part === true
    ? ""
    : inAttribute
    ? escape(String(part))
    : shown(String(part))

/**
 * Whether the template is inside an attribute's value (`name="...`) after `text`. Values
 * there stay as they are (a topic in `data-topic` is what an action sends); text is marked.
 */
const inAttributeAfter = (text: string, inAttribute: boolean): boolean => {
  let state = inAttribute
  for (let i = 0; i < text.length; i++) {
    if (state) {
      if (text[i] === "\"") state = false
    } else if (text[i] === "=" && text[i + 1] === "\"") {
      state = true
      i++
    }
  }
  return state
}

export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Part>): Html => {
  let out = ""
  let inAttribute = false
  for (let i = 0; i < strings.length; i++) {
    out += strings[i]!
    inAttribute = inAttributeAfter(strings[i]!, inAttribute)
    if (i < values.length) out += render(values[i] as Part, inAttribute)
  }
  return new Html(out)
}

/** Markup made here from trusted pieces (numbers, our own SVG). */
export const raw = (text: string): Html => new Html(text)
