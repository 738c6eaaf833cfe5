/**
 * Who acts, as an action records it: the command's OS user or the admin page's operator,
 * fitted to what the library records (`by`: 1-128 UTF-8 bytes, no NUL, no lone surrogate) by
 * cutting whole characters and replacing what PostgreSQL text cannot hold, so no action is
 * refused for its operator's name. Log lines name the operator whole (escaped).
 */
import { userInfo } from "node:os"

/** The most UTF-8 bytes the library records of who acts. */
export const MAX_BY_BYTES = 128

const SURROGATE = /^[\uD800-\uDFFF]$/

/**
 * `who` then `suffix` (` (admin page)`), at most `MAX_BY_BYTES` UTF-8 bytes: characters are
 * counted in bytes and kept whole (an emoji is never split into a lone surrogate), NUL and a
 * lone surrogate become U+FFFD, and a name with nothing left is "an operator".
 */
export const recordedBy = (who: string, suffix = ""): string => {
  const budget = MAX_BY_BYTES - Buffer.byteLength(suffix, "utf8")
  let bytes = 0
  let kept = ""
  // for-of walks code points: a pair is one character, a lone surrogate one of its own.
  for (const character of who) {
    const storable = character === "\u0000" || SURROGATE.test(character) ? "\uFFFD" : character
    bytes += Buffer.byteLength(storable, "utf8")
    if (bytes > budget) break
    kept += storable
  }
  return `${kept.trim() === "" ? "an operator" : kept}${suffix}`
}

/** Who is acting from the command line: the OS user, marked as coming from the command line. */
export const operatorName = (): string => {
  try {
    return recordedBy(userInfo().username, " (cli)")
  } catch {
    return "cli"
  }
}
