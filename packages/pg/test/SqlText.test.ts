import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import * as SqlClient from "effect/sql/SqlClient"
import * as FastCheck from "fast-check"
import { literal } from "../src/internal/sqlText.js"
import { database } from "./support.js"

// Inlined literals must mean exactly the value they replace, whatever the value holds.
const text = FastCheck.string({ unit: "binary", maxLength: 40 }).filter((s) => !s.includes("\u0000"))

describe("inlined literals (the one-round-trip path)", () => {
  it.layer(database())((it) => {
    it.effect("strings and text arrays read back exactly, quotes, backslashes and braces included", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const samples = FastCheck.sample(
          FastCheck.tuple(text, FastCheck.array(FastCheck.option(text), { maxLength: 5 })),
          300
        )
        samples.push([`it's \\ a "test" {x,y} \\' E'`, [`a,b`, `"q"`, `\\`, null, `{}`, ``, `NULL`]])
        for (const [value, list] of samples) {
          const rows = yield* sql.unsafe<{ v: string; l: Array<string | null> }>(
            `SELECT ${literal(value)}::text AS v, ${literal(list)}::text[] AS l`
          )
          expect(rows[0]).toEqual({ v: value, l: list })
        }
      }))

    it.effect("numbers, booleans and null keep their meaning; NUL and non-finite numbers are refused", () =>
      Effect.gen(function*() {
        const sql = yield* SqlClient.SqlClient
        const rows = yield* sql.unsafe<{ n: number; f: number; b: boolean; z: null }>(
          `SELECT ${literal(42)}::int AS n, ${literal(0.25)}::float8 AS f, ${literal(true)} AS b, ${
            literal(null)
          }::text AS z`
        )
        expect(rows[0]).toEqual({ n: 42, f: 0.25, b: true, z: null })
        expect(() => literal("a\u0000b")).toThrow(/NUL/)
        expect(() => literal(Number.NaN)).toThrow()
      }))
  })
})
