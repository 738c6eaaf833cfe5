/**
 * Stored values (a topic, an error text, an operator's name) shown where a control character
 * would act instead of being seen: a terminal (escape sequences set the title, clear the
 * screen, plant links), a log line (a newline forges the next line) or a page (bidi controls
 * reorder what is read). Here they are written as escapes, so they are seen and do nothing.
 * Every log line of the library that names a stored or caller's value writes it through
 * `printable`; the command and the admin page do the same for what they show.
 *
 * @since 0.2.0
 */

/**
 * C0 and C1 controls, DEL, the line and paragraph separators and the bidi controls (embeddings,
 * overrides, isolates, marks): none of them is visible, each can change how the text around it
 * is read.
 */
const CONTROL = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g
/** The same, but a line feed: for text that is ours and may span lines. */
const CONTROL_BUT_NEWLINE =
  /[\u0000-\u0009\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g
/** What `JSON.stringify` leaves raw inside strings (it escapes C0 itself; its own layout is C0). */
const RAW_IN_JSON = /[\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g

/**
 * What a page marks where a stored value is shown: the same but tab, line feed and carriage
 * return (a `<pre>` lays them out). A bidi override would reorder what an operator reads.
 */
export const INVISIBLE =
  /[\u0000-\u0008\u000b\u000c\u000e-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g

const SHORT: Readonly<Record<string, string>> = { "\n": "\\n", "\r": "\\r", "\t": "\\t" }

/** `\u202e`, `\u001b`: how a control character is written here (JSON's notation). */
export const escapeOf = (c: string): string => SHORT[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`

/** `U+202E`: how a page names one. */
export const codePointOf = (c: string): string => `U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0")}`

/** The text on one line, every control character written as an escape (`\n`, `\u001b`, `\u202e`). */
export const printable = (text: string): string => text.replace(CONTROL, escapeOf)

/** Every control character but the line feed written as an escape: lines of our own output. */
export const printableLines = (text: string): string => text.replace(CONTROL_BUT_NEWLINE, escapeOf)

/**
 * JSON text with the controls JSON itself leaves raw (DEL, C1, bidi, the separators) escaped
 * too: the same JSON value, safe on a terminal. They can only occur inside strings, where
 * `\uXXXX` means the same character.
 */
export const printableJson = (json: string): string => json.replace(RAW_IN_JSON, escapeOf)
