/**
 * Options declared once. Each option is one line: the rule its value is checked by (a
 * `Schema` from `Input`), its default, the environment variable it is read from, what it is
 * for and a value that works. Everything else is derived from that table: the decoder of an
 * options object (a bad field is a `DurableConfigError` naming it), the `Config` that reads
 * the variables (a bad or missing one is a `DurableConfigError` naming the variable, what it
 * is for and an example), the defaults, and the hint table the configuration reference shows.
 *
 * @since 0.2.0
 */
import * as Config from "effect/Config"
import * as Effect from "effect/Effect"
import * as Option from "effect/Option"
import * as Schema from "effect/Schema"
import type { DurableConfigError } from "./Errors.js"
import * as Input from "./Input.js"

/** How a variable's text becomes the option's value, before its rule checks it. */
export type Text = "string" | "integer" | "boolean" | "list" | "redacted"

/** One option: what `declare` takes. */
export interface Declaration<A> {
  /** The rule a value is checked by, as code gives it and as a variable's text decodes to. */
  readonly schema: Schema.Decoder<A>
  /** The value when none is given; without one the option is required, or optional when `optional`. */
  readonly default?: unknown
  /** Absent means absent (no default, not required): the decoded field is then `undefined`. */
  readonly optional?: true
  /** The environment variable it is read from, if any. */
  readonly variable?: string
  /** How the variable's text is read. Default `"string"`. */
  readonly text?: Text
  /** What it is for, said in errors and in the configuration reference. */
  readonly purpose: string
  /** A value that works, said in errors and in the reference. */
  readonly example: string
}

type Declarations = Readonly<Record<string, Declaration<any>>>

type ValueOf<T> = T extends Declaration<infer A> ? A : never

/** The decoded options: each declared field with its rule's type; an optional one absent when not given. */
export type Decoded<D extends Declarations> =
  & { readonly [K in keyof D as D[K] extends { readonly optional: true } ? never : K]: ValueOf<D[K]> }
  & { readonly [K in keyof D as D[K] extends { readonly optional: true } ? K : never]?: ValueOf<D[K]> }

/** One option, as a table row: the declaration keeps its exact type (its default's too). */
export const option = <const T extends Declaration<any>>(declaration: T): T => declaration

/** The declared defaults, by field. */
export type Defaults<D extends Declarations> = {
  readonly [K in keyof D as D[K] extends { readonly default: {} } ? K : never]: D[K] extends
    { readonly default: infer V } ? V : never
}

const read = (variable: string, text: Text | undefined): Config.Config<unknown> => {
  switch (text) {
    case "integer":
      return Config.Int(variable)
    case "boolean":
      return Config.Boolean(variable)
    case "list":
      return Config.Array(Schema.String, variable)
    case "redacted":
      return Config.Redacted(variable)
    default:
      return Config.String(variable)
  }
}

/**
 * A table of options. `decode` checks an options object (unknown fields refused), `config`
 * reads the declared variables (unset ones take the defaults), `variables` is the hint table,
 * `defaults` the defaults.
 */
export const declare = <const D extends Declarations>(declarations: D, prefix?: string) => {
  const entries = Object.entries(declarations) as Array<[string, Declaration<unknown>]>
  const fields: Record<string, Schema.Top> = {}
  for (const [name, declaration] of entries) {
    const schema = declaration.schema as unknown as Schema.Top
    fields[name] = declaration.default !== undefined
      ? (schema as any).pipe(Schema.withDecodingDefault(Effect.sync(() => declaration.default)))
      : declaration.optional === true
      ? Schema.optionalKey(schema as any)
      : schema
  }
  const decodeObject = Input.options(Schema.Struct(fields) as unknown as Schema.Decoder<Decoded<D>>, prefix)

  /** Every declared variable: what it is for and a value that works. */
  const variables: Readonly<Record<string, Input.VariableHint>> = Object.fromEntries(
    entries.flatMap(([, d]) =>
      d.variable === undefined ? [] : [[d.variable, { purpose: d.purpose, example: d.example }]]
    )
  )
  /** Which variable each field comes from. */
  const fieldVariables: Readonly<Record<string, string>> = Object.fromEntries(
    entries.flatMap(([name, d]) => d.variable === undefined ? [] : [[name, d.variable]])
  )
  const defaults = Object.fromEntries(
    entries.flatMap(([name, d]) => d.default === undefined ? [] : [[name, d.default]])
  ) as Defaults<D>

  /** The options the variables give (unset ones left out, so the defaults apply). */
  const fromEnvironment: Config.Config<Record<string, unknown>> = Config.all(
    Object.fromEntries(
      entries.flatMap(([name, d]) => d.variable === undefined ? [] : [[name, Config.option(read(d.variable, d.text))]])
    ) as Record<string, Config.Config<Option.Option<unknown>>>
  ).pipe(
    Config.map((values) =>
      Object.fromEntries(
        Object.entries(values).flatMap(([name, value]) => Option.isSome(value) ? [[name, value.value]] : [])
      )
    )
  )

  /** A decode failure renamed to the variable its field came from, with its hint. */
  const byVariable = (error: DurableConfigError) => Input.fromVariable(error, fieldVariables, variables)

  return {
    declarations,
    variables,
    fieldVariables,
    defaults,
    /** Checks an options object; a bad field is a `DurableConfigError` naming it. */
    decode: decodeObject as (input: unknown) => Effect.Effect<Decoded<D>, DurableConfigError>,
    /**
     * Reads the variables and checks them as `decode` would, `overrides` (from code) winning;
     * a bad or missing variable is a `DurableConfigError` naming it, its purpose and an example.
     */
    fromConfig: (overrides: Readonly<Record<string, unknown>> = {}) =>
      Effect.gen(function*() {
        const given = yield* Effect.mapError(fromEnvironment, (error) => Input.configError(error, variables))
        return yield* Effect.mapError(decodeObject({ ...given, ...overrides }), byVariable)
      })
  }
}
