/**
 * Message ids as the substrate stores them: PostgreSQL `bigint`, written in decimal. An id
 * past its range is bad input (a 400, exit 2), never a statement the database refuses.
 */

/** The largest id a `bigint` holds. */
export const MAX_MESSAGE_ID = 9223372036854775807n

/** A positive integer in decimal, no leading zero, at most `MAX_MESSAGE_ID`. */
export const isMessageId = (text: string): boolean => /^[1-9][0-9]{0,18}$/.test(text) && BigInt(text) <= MAX_MESSAGE_ID

/** What a message id is, as an error says it. */
export const MESSAGE_ID_RULE = `a message id (a positive integer up to ${MAX_MESSAGE_ID}, as a string)`
