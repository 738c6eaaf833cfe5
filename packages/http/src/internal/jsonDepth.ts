/**
 * How deep JSON text nests arrays and objects, found by scanning it (never by a recursive
 * parse): a body nested thousands deep overflows the stack of a recursive decoder (a
 * `Schema.suspend` field is decoded level by level), and that defect would be a 500.
 */

/** Whether `text` opens more than `max` arrays or objects inside one another (strings skipped). */
export const exceeds = (text: string, max: number): boolean => {
  let depth = 0
  let inString = false
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i)
    if (inString) {
      if (code === 0x5c) i++ // a backslash escapes the next character
      else if (code === 0x22) inString = false
    } else if (code === 0x22) {
      inString = true
    } else if (code === 0x5b || code === 0x7b) {
      if (++depth > max) return true
    } else if (code === 0x5d || code === 0x7d) {
      depth--
    }
  }
  return false
}

/** `application/json` and `*+json`, with any parameters: bodies a handler reads as JSON. */
export const isJsonContentType = (contentType: string | undefined): boolean => {
  if (contentType === undefined) return false
  const mediaType = contentType.toLowerCase().split(";")[0]!.trim()
  return mediaType === "application/json" || mediaType.endsWith("+json")
}
