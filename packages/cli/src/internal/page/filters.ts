/**
 * The message filter as it lives in the admin page's URL (so a filtered view is a link to
 * share) and back: `id=1,2`, `topic`, `key` (ordering key), `state`, `attempts` (at least),
 * `older` (created longer ago than: 30m, 7d), `dead` (dead for longer than), `error` (an
 * error group), `payload=customer.id=42` and `header=tenant=acme` (repeatable). The library
 * decodes the result, so a bad value is its typed error naming the field.
 */
import type * as OutboxSearch from "@effect-durable/pg/OutboxSearch"
import type * as Duration from "effect/Duration"
import * as Effect from "effect/Effect"
import { parseDuration } from "../durations.js"
import { PageError } from "./edge.js"

const KEYS = ["id", "topic", "key", "state", "attempts", "older", "dead", "error", "payload", "header"] as const

const match = (text: string): OutboxSearch.JsonMatch => {
  const at = text.indexOf("=")
  const path = (at === -1 ? text : text.slice(0, at)).split(".").filter((part) => part.length > 0)
  return { path, value: at === -1 ? "" : text.slice(at + 1) }
}

/** The filter a query string describes (undecoded: the library checks it). */
export const parse = (params: URLSearchParams): OutboxSearch.MessageFilter => {
  const one = (key: string) => {
    const value = params.get(key)?.trim()
    return value === undefined || value === "" ? undefined : value
  }
  const many = (key: string) => params.getAll(key).map((v) => v.trim()).filter((v) => v.length > 0)
  const ids = one("id")?.split(/[\s,]+/).filter((id) => id.length > 0)
  const attempts = one("attempts")
  const older = one("older")
  const dead = one("dead")
  const state = one("state")
  const error = params.get("error") ?? undefined
  return {
    ...(ids === undefined ? {} : { ids }),
    ...(one("topic") === undefined ? {} : { topic: one("topic")! }),
    ...(one("key") === undefined ? {} : { orderingKey: one("key")! }),
    ...(state === undefined ? {} : { state: state as OutboxSearch.MessageState }),
    // Digits only: `Number` reads 0x10 as 16 and 1e1 as 10; NaN goes on for the library to refuse.
    ...(attempts === undefined ? {} : { minAttempts: /^\d+$/.test(attempts) ? Number(attempts) : Number.NaN }),
    // What is not a duration goes to the library as it is, which refuses it naming the field.
    ...(older === undefined ? {} : { olderThan: parseDuration(older) ?? (older as Duration.Input) }),
    ...(dead === undefined ? {} : { deadFor: parseDuration(dead) ?? (dead as Duration.Input) }),
    ...(error === undefined || error === "" ? {} : { error }),
    ...(many("payload").length === 0 ? {} : { payload: many("payload").map(match) }),
    ...(many("header").length === 0 ? {} : { headers: many("header").map(match) })
  }
}

/**
 * The message filter of a query string, on a page that shows payloads or not. With payloads
 * hidden, a filter on their values would tell them one guess at a time (one row for the right
 * value, none for a wrong one): refused.
 */
export const ofQuery =
  (showPayloads: boolean) => (params: URLSearchParams): Effect.Effect<OutboxSearch.MessageFilter, PageError> =>
    !showPayloads && params.getAll("payload").some((value) => value.trim() !== "")
      ? Effect.fail(
        new PageError({
          status: 400,
          message: "invalid filter.payload: payloads are hidden on this page, and so is the filter on them"
        })
      )
      : Effect.succeed(parse(params))

/** Only the filter's own parameters of a query string (not paging), in a stable order. */
export const filterQuery = (params: URLSearchParams): string => {
  const out = new URLSearchParams()
  for (const key of KEYS) for (const value of params.getAll(key)) if (value.trim() !== "") out.append(key, value)
  return out.toString()
}

/** The query string of a filter built in code (the links of the dead-letter groups). */
export const toQuery = (
  filter: { readonly topic?: string; readonly state?: string; readonly error?: string }
): string => {
  const out = new URLSearchParams()
  if (filter.topic !== undefined) out.set("topic", filter.topic)
  if (filter.state !== undefined) out.set("state", filter.state)
  if (filter.error !== undefined) out.set("error", filter.error)
  return out.toString()
}
