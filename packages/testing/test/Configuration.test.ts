// The numbers and names the documentation states that the code knows — every variable, option
// and default of docs/configuration.md, the migrations of docs/deploying.md, the defaults that
// prose elsewhere repeats, the variables any document names — checked against the code's own
// exports (or, for the command's flags, its sources). A variable renamed, an option added or a
// default changed fails here until the documentation says so.
import * as Cursor from "@effect-durable/core/Cursor"
import * as Durable from "@effect-durable/pg/Durable"
import * as DurableConfig from "@effect-durable/pg/DurableConfig"
import * as Inbox from "@effect-durable/pg/Inbox"
import * as InboxAdmin from "@effect-durable/pg/InboxAdmin"
import * as LeasedQueue from "@effect-durable/pg/LeasedQueue"
import * as Migrations from "@effect-durable/pg/Migrations"
import * as MutationLedger from "@effect-durable/pg/MutationLedger"
import * as Outbox from "@effect-durable/pg/Outbox"
import * as OutboxAdmin from "@effect-durable/pg/OutboxAdmin"
import { describe, expect, it } from "@effect/vitest"
import type * as Config from "effect/Config"
import * as ConfigProvider from "effect/ConfigProvider"
import * as Effect from "effect/Effect"
import * as Exit from "effect/Exit"
import * as Layer from "effect/Layer"
import * as Option from "effect/Option"
import { readdirSync, readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"

const root = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "..")
const read = (path: string) => readFileSync(join(root, path), "utf8")
const documents = [
  "README.md",
  ...readdirSync(join(root, "docs")).filter((name) => name.endsWith(".md")).map((name) => `docs/${name}`)
]

// The packages above this one (the projector, the HTTP middleware, the admin page) are loaded
// at run time, so that this package's type-check does not depend on them being built.
const load = (specifier: string): Promise<any> => import(specifier)

// --- Markdown ---------------------------------------------------------------------------------

type Row = Readonly<Record<string, string>>

/** The table after `<!-- table: name -->` in a document, as rows keyed by the header's cells. */
const table = (document: string, name: string): ReadonlyArray<Row> => {
  const lines = read(document).split("\n")
  const start = lines.indexOf(`<!-- table: ${name} -->`)
  if (start < 0) throw new Error(`${document} has no table ${name}`)
  const rows: Array<ReadonlyArray<string>> = []
  for (const line of lines.slice(start + 1)) {
    if (!line.startsWith("|")) break
    rows.push(
      line.slice(1, line.trimEnd().endsWith("|") ? line.trimEnd().length - 1 : undefined)
        .split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"))
    )
  }
  const [header, , ...body] = rows
  return body.map((cells) => Object.fromEntries(header!.map((key, i) => [key, cells[i] ?? ""])))
}

/** The text of each code span in a cell: "`POST`, `PATCH`" is ["POST", "PATCH"]. */
const spans = (cell: string): ReadonlyArray<string> => [...cell.matchAll(/`([^`]*)`/g)].map((match) => match[1]!)
const span = (cell: string): string | undefined => spans(cell)[0]

/** A variable cell: its name, or undefined for "–" (code only). */
const variableOf = (row: Row): string | undefined => span(row.variable ?? "")

/** A document's text with its whitespace collapsed, for phrases that wrap across lines. */
const flat = (document: string) => read(document).replace(/\s+/g, " ")

// --- Values ---------------------------------------------------------------------------------

const UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  millis: 1,
  millisecond: 1,
  milliseconds: 1,
  s: 1000,
  second: 1000,
  seconds: 1000,
  min: 60_000,
  minute: 60_000,
  minutes: 60_000,
  h: 3_600_000,
  hour: 3_600_000,
  hours: 3_600_000,
  d: 86_400_000,
  day: 86_400_000,
  days: 86_400_000,
  KiB: 1024,
  MiB: 1024 * 1024
}
const DURATION_UNITS = new Set(Object.keys(UNITS).filter((unit) => !unit.endsWith("iB")))

/** "10 seconds", "10 s", "256 KiB", "25": a comparable number and its kind. */
const quantity = (
  text: string
): { readonly kind: "duration" | "size" | "count"; readonly value: number } | undefined => {
  const match = text.trim().match(/^(\d[\d,_]*(?:\.\d+)?)\s*([A-Za-z]+)?$/)
  if (match === null) return undefined
  const number = Number(match[1]!.replace(/[,_]/g, ""))
  const unit = match[2]
  if (unit === undefined) return { kind: "count", value: number }
  if (UNITS[unit] === undefined) return undefined
  return { kind: DURATION_UNITS.has(unit) ? "duration" : "size", value: number * UNITS[unit]! }
}

/** The parenthesised size after a default (`262144` (256 KiB)) is the same number. */
const expectSizeNote = (cell: string, value: unknown, where: string) => {
  const note = cell.match(/\((\d+(?:\.\d+)?\s*[KM]iB)\)/)
  if (note !== null) expect(quantity(note[1]!)?.value, `${where}: ${note[0]}`).toBe(value)
}

/** A documented default cell against the code's default. */
const expectDefault = (cell: string, code: unknown, where: string) => {
  if (typeof code === "object" && code !== null && !Array.isArray(code) && Object.keys(code).length === 0) {
    expect(cell, `${where}: an empty default is "none"`).toBe("none")
  } else if (Array.isArray(code)) {
    expect(spans(cell), where).toEqual(code.map(String))
  } else {
    expect(span(cell), where).toBe(String(code))
    expectSizeNote(cell, code, where)
  }
}

// --- Configuration --------------------------------------------------------------------------

/** A provider over `values` that records every variable a `Config` asks it for. */
const recording = (values: Readonly<Record<string, string>> = {}) => {
  const asked = new Set<string>()
  const provider = ConfigProvider.make((path) => {
    const name = path.map(String).join("_")
    asked.add(name)
    const value = values[name]
    return Effect.succeed(value === undefined ? undefined : ConfigProvider.makeValue(value))
  })
  return { asked, provider }
}

const parse = <A>(config: Config.Config<A>, values: Readonly<Record<string, string>> = {}) => {
  const { asked, provider } = recording(values)
  const exit = Effect.runSyncExit(config.parse(provider))
  return { asked, exit }
}

/** Whether an effect that decodes options first refuses them with a `DurableConfigError`. */
const refuses = async (effect: Effect.Effect<unknown, unknown, any>): Promise<boolean> => {
  const exit = await Effect.runPromiseExit(Effect.scoped(effect as Effect.Effect<unknown, unknown, never>))
  const error = Option.getOrUndefined(Exit.findErrorOption(exit)) as { readonly _tag?: string } | undefined
  return error?._tag === "DurableConfigError"
}

/** A URL nothing listens at: a layer built on it reads its configuration, then fails to connect. */
const UNREACHABLE = "postgres://app:secret@127.0.0.1:1/app"

/** The variables a layer reads while it is built (what the build does next does not matter). */
const variablesRead = async (layer: Layer.Layer<any, any, any>, values: Readonly<Record<string, string>> = {}) => {
  const { asked, provider } = recording(values)
  await Effect.runPromiseExit(
    Effect.scoped(Layer.build(layer as Layer.Layer<any, unknown, never>)).pipe(
      Effect.timeout("30 seconds"),
      Effect.provideService(ConfigProvider.ConfigProvider, provider)
    )
  )
  return asked
}

describe("docs/configuration.md", () => {
  it("the substrate: exactly the variables Durable.layerConfig reads, with the code's defaults", async () => {
    const rows = table("docs/configuration.md", "substrate")
    const documented = rows.flatMap((row) => variableOf(row) ?? [])
    expect(
      [
        ...(await variablesRead(Durable.layerConfig({ cursorKeys: Cursor.keyringConfig }), {
          DATABASE_URL: UNREACHABLE,
          DURABLE_CONNECT_TIMEOUT: "1 second"
        }))
      ].sort()
    )
      .toEqual([...documented].sort())
    // DurableConfig.Variables, the hints errors quote, are all documented; a range stated is the hint's.
    for (const variable of Object.keys(DurableConfig.Variables)) expect(documented, variable).toContain(variable)
    for (const row of rows) {
      const hint = DurableConfig.Variables[variableOf(row) ?? ""]
      for (const range of row.meaning!.matchAll(/\((\d+-\d+)\)/g)) {
        expect(hint?.purpose, `${span(row.option!)}: ${range[0]}`).toContain(range[0])
      }
    }

    const codeDefaults: Readonly<Record<string, Readonly<Record<string, unknown>>>> = {
      connection: DurableConfig.Defaults,
      settings: DurableConfig.Defaults,
      outbox: Outbox.Defaults,
      inbox: Inbox.Defaults
    }
    for (const row of rows) {
      const option = span(row.option!)!
      const [group, field] = option.split(".") as [string, string | undefined]
      const defaults = codeDefaults[group]
      if (defaults !== undefined && field !== undefined && field in defaults) {
        expectDefault(row.default!, defaults[field], `substrate ${option}`)
      }
    }
    // Every default the code has is documented.
    const options = new Set(rows.map((row) => span(row.option!)))
    for (const field of Object.keys(DurableConfig.Defaults)) {
      expect(options.has(`connection.${field}`) || options.has(`settings.${field}`), `${field} is not documented`).toBe(
        true
      )
    }
    for (const field of Object.keys(Outbox.Defaults)) {
      expect(options.has(`outbox.${field}`), `outbox.${field}`).toBe(true)
    }
    for (const field of Object.keys(Inbox.Defaults)) expect(options.has(`inbox.${field}`), `inbox.${field}`).toBe(true)
  })

  it("the substrate: the payload bounds stated are the ones the options are decoded with", async () => {
    for (const [name, decode] of [["outbox", Outbox.decodeOptions], ["inbox", Inbox.decodeOptions]] as const) {
      const row = table("docs/configuration.md", "substrate").find((row) =>
        span(row.option!) === `${name}.maxPayloadBytes`
      )!
      const most = quantity(row.meaning!.match(/at most (\d+ [KM]iB)/)![1]!)!.value
      expect(await refuses(decode({ maxPayloadBytes: most })), `${name}: ${most} refused`).toBe(false)
      expect(await refuses(decode({ maxPayloadBytes: most + 1 })), `${name}: ${most + 1} accepted`).toBe(true)
    }
  })

  it("the projector: exactly the PROJECTOR_* variables Projector.layerConfig reads, with Projector.Defaults", async () => {
    const Projector = await load("@effect-durable/projector/Projector")
    const rows = table("docs/configuration.md", "projector")
    const documented = rows.flatMap((row) => variableOf(row) ?? [])
    expect([...(await variablesRead(Projector.layerConfig()))].sort()).toEqual([...documented].sort())
    const key = (option: string) => option.replace(/\.(\w)/g, (_, c: string) => c.toUpperCase()) // backoff.min: backoffMin
    for (const row of rows) {
      const option = span(row.option!)!
      if (key(option) in Projector.Defaults) {
        expectDefault(row.default!, Projector.Defaults[key(option)], `projector ${option}`)
      }
    }
    for (const name of Object.keys(Projector.Defaults)) {
      expect(rows.some((row) => key(span(row.option!)!) === name), `projector ${name} is not documented`).toBe(true)
    }
  })
  it("HTTP idempotency: every default of Idempotency.Defaults, and the bounds stated", async () => {
    const Idempotency = await load("@effect-durable/http/Idempotency")
    const rows = table("docs/configuration.md", "http")
    for (const row of rows) {
      const option = span(row.option!)!
      expect(option in Idempotency.Defaults, `${option} is no option of Idempotency.Defaults`).toBe(true)
      expectDefault(row.default!, Idempotency.Defaults[option], `http ${option}`)
      const most = row.meaning!.match(/\(at most (\d+(?: [KM]iB)?)\)/)
      if (most !== null) {
        const bound = quantity(most[1]!)!.value
        expect(await refuses(Idempotency.wrapper({ [option]: bound })), `${option}: ${bound} refused`).toBe(false)
        expect(await refuses(Idempotency.wrapper({ [option]: bound + 1 })), `${option}: ${bound + 1} accepted`).toBe(
          true
        )
      }
    }
    expect(rows.map((row) => span(row.option!)).sort()).toEqual(Object.keys(Idempotency.Defaults).sort())
  })

  it("the admin page: AdminPage.Defaults, the DURABLE_DASHBOARD_* variables and their rules", async () => {
    const AdminPage = await load("@effect-durable/cli/AdminPage")
    const rows = table("docs/configuration.md", "admin-page")
    for (const name of Object.keys(AdminPage.Defaults)) {
      const row = rows.find((row) => span(row.option!) === name)
      expect(row, `admin page ${name} is not documented`).toBeDefined()
      expectDefault(row!.default!, AdminPage.Defaults[name], `admin page ${name}`)
    }
    const variables = table("docs/configuration.md", "dashboard")
    const { asked, exit } = parse(AdminPage.config)
    expect([...asked].sort()).toEqual(variables.map((row) => span(row.variable!)!).sort())
    expect(Exit.isSuccess(exit)).toBe(true)
    const parsed = Exit.isSuccess(exit) ? exit.value : undefined
    expect(span(variables.find((row) => span(row.variable!) === "DURABLE_DASHBOARD_READ_ONLY")!.default!)).toBe(
      String((parsed as { readOnly: boolean }).readOnly)
    )
    // "at least 16 characters", as the page's rules count them.
    const least = Number(flat("docs/configuration.md").match(/at least (\d+) characters, held as `Redacted` \|/)![1])
    for (const variable of ["DURABLE_DASHBOARD_TOKEN"]) {
      expect(Exit.isSuccess(parse(AdminPage.config, { [variable]: "t".repeat(least) }).exit), `${variable} of ${least}`)
        .toBe(true)
      expect(
        Exit.isSuccess(parse(AdminPage.config, { [variable]: "t".repeat(least - 1) }).exit),
        `${variable} of ${least - 1}`
      ).toBe(false)
    }
    const basic = { DURABLE_DASHBOARD_USER: "operator" }
    expect(Exit.isSuccess(parse(AdminPage.config, { ...basic, DURABLE_DASHBOARD_PASSWORD: "p".repeat(least) }).exit))
      .toBe(true)
    expect(
      Exit.isSuccess(parse(AdminPage.config, { ...basic, DURABLE_DASHBOARD_PASSWORD: "p".repeat(least - 1) }).exit)
    ).toBe(false)
  })

  it("the command: its own defaults and its flags' defaults are the sources'", () => {
    const connection = read("packages/cli/src/internal/connection.ts")
    const literal = connection.match(/const CLI_DEFAULTS[^=]*=\s*\{([^}]*)\}/)![1]!
    const cliDefaults = Object.fromEntries(
      [...literal.matchAll(/(\w+):\s*"([^"]*)"/g)].map((match) => [match[1], match[2]])
    )
    const rows = table("docs/configuration.md", "cli-defaults")
    expect(Object.fromEntries(rows.map((row) => [span(row.variable!), span(row["the command's default"]!)]))).toEqual(
      cliDefaults
    )

    const shared = ["connection.ts", "arguments.ts"].map((file) => read(`packages/cli/src/internal/${file}`)).join("\n")
    const FILES: Readonly<Record<string, string>> = {
      status: "status.ts",
      "dead-letters": "deadLetters.ts",
      purge: "purge.ts",
      explain: "explain.ts",
      dashboard: "dashboard.ts",
      "dev-database": "devDatabase.ts"
    }
    for (const row of table("docs/configuration.md", "cli-flags")) {
      const command = row.command!.replace(/`/g, "").split(/[\s,]/)[0]!
      const own = FILES[command] === undefined ? "" : read(`packages/cli/src/internal/commands/${FILES[command]}`)
      for (const flagText of spans(row.flag!).filter((text) => text.startsWith("--"))) {
        const flag = flagText.slice(2).split(" ")[0]!
        const where = `${row.command} ${flagText}`
        const defined = `${own}\n${shared}`
        expect(defined.includes(`("${flag}"`), `${where}: no such flag in the sources`).toBe(true)
        const positive = own.match(new RegExp(`positive\\("${flag}", ([\\d_]+), ([\\d_]+),`))
        const plain = defined.match(
          new RegExp(
            `\\("${flag}"\\)\\.pipe\\(\\s*(?:Flag\\.\\w+\\("[^"]*"\\),\\s*)*Flag\\.withDefault\\(("?)([^")]*)\\1\\)`
          )
        )
        const toggle = new RegExp(`toggle\\("${flag}"`).test(defined)
        const code = positive !== null
          ? positive[1]!.replace(/_/g, "")
          : plain !== null
          ? plain[2]!
          : toggle
          ? "false"
          : undefined
        if (row.default === "off") expect(code, where).toBe("false")
        else if (FILES[command] !== undefined && span(row.default!) !== undefined) {
          expect(span(row.default!), where).toBe(code)
        }
        const range = row.meaning!.match(/\(1 to (\d+)\)/)
        if (range !== null) expect(positive?.[2]?.replace(/_/g, ""), `${where}: ${range[0]}`).toBe(range[1])
      }
    }
  })

  it("everything else: each variable is read somewhere in the code", () => {
    const sources = [
      "packages/testing/src/PgServer.ts",
      "packages/testing/src/TestDatabase.ts",
      "packages/testing/src/NatsServer.ts",
      "packages/cli/src/bin.ts",
      "packages/cli/test/setup/browser.ts",
      "examples/jobs/src/main.ts",
      "scripts/bench.sh"
    ].map(read).join("\n")
    for (const row of table("docs/configuration.md", "other")) {
      const variable = span(row.variable!)!
      expect(new RegExp(`\\b${variable}\\b`).test(sources), `${variable} is read nowhere`).toBe(true)
    }
  })
})

describe("numbers the code knows, wherever the docs state them", () => {
  it("docs/deploying.md lists every migration, in order, by the code's own names", () => {
    const rows = table("docs/deploying.md", "migrations")
    expect(rows.map((row) => [Number(row.version), row.name])).toEqual(
      Migrations.migrations.map((migration) => [migration.version, migration.name])
    )
  })

  it("a count of migrations is Migrations.migrations.length; a migration named by number exists", () => {
    const WORDS = [
      "zero",
      "one",
      "two",
      "three",
      "four",
      "five",
      "six",
      "seven",
      "eight",
      "nine",
      "ten",
      "eleven",
      "twelve",
      "thirteen",
      "fourteen",
      "fifteen",
      "sixteen",
      "seventeen",
      "eighteen",
      "nineteen",
      "twenty"
    ]
    for (const document of documents) {
      const text = flat(document)
      for (const match of text.matchAll(/\b(\w+) (?:schema )?(?:migrations|versions)\b/gi)) {
        const word = match[1]!.toLowerCase()
        const count = /^\d+$/.test(word) ? Number(word) : WORDS.indexOf(word)
        if (count >= 0) expect(count, `${document}: "${match[0]}"`).toBe(Migrations.migrations.length)
      }
      for (const match of text.matchAll(/\bmigrations? (\d+)\b/gi)) {
        expect(
          Migrations.migrations.some((migration) => migration.version === Number(match[1])),
          `${document}: "${match[0]}"`
        )
          .toBe(true)
      }
    }
  })

  it("a default repeated in prose (`name` (value), `name`, value by default) is the code's", async () => {
    const Projector = await load("@effect-durable/projector/Projector")
    const Idempotency = await load("@effect-durable/http/Idempotency")
    const AdminPage = await load("@effect-durable/cli/AdminPage")
    // Every name a default is documented under, from the checked tables: options and variables.
    const known = new Map<string, unknown>()
    const conflicting = new Set<string>()
    const add = (name: string | undefined, value: unknown) => {
      if (name === undefined || value === undefined) return
      if (known.has(name) && known.get(name) !== value) conflicting.add(name)
      known.set(name, value)
    }
    for (const row of table("docs/configuration.md", "substrate")) {
      const option = span(row.option!)!
      const [group, field] = option.split(".") as [string, string | undefined]
      const defaults: Record<string, unknown> = group === "outbox"
        ? Outbox.Defaults
        : group === "inbox"
        ? Inbox.Defaults
        : DurableConfig.Defaults
      const value = field === undefined ? undefined : defaults[field]
      add(field, value)
      add(variableOf(row), value)
    }
    for (const row of table("docs/configuration.md", "projector")) {
      const option = span(row.option!)!
      const value = Projector.Defaults[option.replace(/\.(\w)/g, (_: string, c: string) => c.toUpperCase())]
      add(option, value)
      add(variableOf(row), value)
    }
    for (const [name, value] of Object.entries(Idempotency.Defaults)) add(name, value)
    for (const [name, value] of Object.entries(AdminPage.Defaults)) add(name, value)
    for (const name of conflicting) known.delete(name)

    const wrong: Array<string> = []
    for (const document of documents) {
      const text = flat(document)
      for (const match of text.matchAll(/`([\w.]+)`(?: \(|,? )(\d[\d,.]*(?: ?[A-Za-z]+)?)(?:[,;)]| by default)/g)) {
        if (!known.has(match[1]!)) continue
        const stated = quantity(match[2]!)
        const code = known.get(match[1]!)
        const actual = typeof code === "number" ? { kind: "count", value: code } : quantity(String(code))
        if (stated === undefined || actual === undefined) continue
        const same = stated.kind === actual.kind
          ? stated.value === actual.value
          : actual.kind === "count" && stated.kind === "size" && stated.value === actual.value
        if (!same) wrong.push(`${document}: "${match[0]}" (the code: ${String(code)})`)
      }
    }
    expect(wrong).toEqual([])
  })

  it("the defaults and bounds that prose states in its own words are the code's", () => {
    const phrases: Array<readonly [string, string]> = [
      ["docs/outbox.md", `After \`DURABLE_OUTBOX_MAX_ATTEMPTS\` failed deliveries (${Outbox.Defaults.maxAttempts};`],
      ["docs/outbox.md", `(dead: ${Outbox.Defaults.maxAttempts} failed deliveries)`],
      ["docs/outbox.md", `its lease ran out ${LeasedQueue.Defaults.maxLeaseExpiries} times`],
      ["docs/outbox.md", `\`DURABLE_OUTBOX_MAX_PAYLOAD_BYTES\` (${Outbox.Defaults.maxPayloadBytes / 1024} KiB)`],
      ["docs/ledger.md", `\`MutationLedger.PURGE_FLOOR\` (${MutationLedger.PURGE_FLOOR})`],
      [
        "docs/operating.md",
        `(floors: ${OutboxAdmin.PURGE_FLOOR}, ${InboxAdmin.PURGE_FLOOR}, ${MutationLedger.PURGE_FLOOR})`
      ],
      [
        "docs/transactions.md",
        `at least ${MutationLedger.PURGE_FLOOR} (ledger, inbox) or ${OutboxAdmin.PURGE_FLOOR} (outbox)`
      ],
      ["docs/pagination.md", `a subject of 1–${Cursor.MAX_SUBJECT_BYTES} UTF-8 bytes (\`MAX_SUBJECT_BYTES\`)`],
      [
        "docs/pagination.md",
        `at most ${Cursor.MAX_BYTES_PER_CHARACTER} bytes in it (\`MAX_BYTES_PER_CHARACTER\`)`
      ],
      ["docs/pagination.md", `a token of at most ${Cursor.MAX_TOKEN_LENGTH} characters (\`MAX_TOKEN_LENGTH\`)`]
    ]
    expect(InboxAdmin.PURGE_FLOOR).toBe(MutationLedger.PURGE_FLOOR)
    // In words: the outbox's purge floor is "one minute", the inbox's "one hour".
    expect([OutboxAdmin.PURGE_FLOOR, InboxAdmin.PURGE_FLOOR]).toEqual(["1 minute", "1 hour"])
    phrases.push(["docs/outbox.md", "never younger than one minute"], ["docs/inbox.md", "never younger than one hour"])
    const missing = phrases.filter(([document, phrase]) => !flat(document).includes(phrase))
    expect(missing).toEqual([])
  })

  it("the command's synopses in docs/operating.md show its flags' defaults", () => {
    const flagDefault = (file: string, flag: string) => {
      const source = read(`packages/cli/src/internal/commands/${file}`)
      const positive = source.match(new RegExp(`positive\\("${flag}", ([\\d_]+),`))
      if (positive !== null) return positive[1]!.replace(/_/g, "")
      // Settings before the default (a metavar) are skipped.
      return source.match(
        new RegExp(
          `\\("${flag}"\\)\\.pipe\\(\\s*(?:Flag\\.\\w+\\("[^"]*"\\),\\s*)*Flag\\.withDefault\\(("?)([^")]*)\\1\\)`
        )
      )![2]!
    }
    const compact = (duration: string) =>
      duration.replace(/^(\d+) (second|minute|hour)s?$/, (_, n: string, unit: string) => `${n}${unit[0]}`)
    const text = flat("docs/operating.md")
    const expected = [
      `\`status [--watch] [--interval ${compact(flagDefault("status.ts", "interval"))}]\``,
      `\`dead-letters list [filters] [--limit ${flagDefault("deadLetters.ts", "limit")}] [--before ID]\``,
      `[--limit ${flagDefault("explain.ts", "limit")}]\``,
      `\`dashboard [--port ${flagDefault("dashboard.ts", "port")}] [--host ${flagDefault("dashboard.ts", "host")}]`,
      `default ${flagDefault("deadLetters.ts", "batch-size")} for redrive and discard, ${
        flagDefault("purge.ts", "batch-size")
      } for purge`
    ]
    expect(expected.filter((phrase) => !text.includes(phrase))).toEqual([])
  })

  it("every DURABLE_* and PROJECTOR_* variable a document names is one the code reads", async () => {
    const Projector = await load("@effect-durable/projector/Projector")
    const AdminPage = await load("@effect-durable/cli/AdminPage")
    const known = new Set([
      ...await variablesRead(Durable.layerConfig({ cursorKeys: Cursor.keyringConfig }), {
        DATABASE_URL: UNREACHABLE,
        DURABLE_CONNECT_TIMEOUT: "1 second"
      }),
      ...await variablesRead(Projector.layerConfig()),
      ...parse(AdminPage.config).asked
    ])
    const unknown: Array<string> = []
    for (const document of documents) {
      for (const match of read(document).matchAll(/\b(?:DURABLE|PROJECTOR)_[A-Z0-9_]*[A-Z0-9]\b|\bCURSOR_KEYS\b/g)) {
        if (!known.has(match[0])) unknown.push(`${document}: ${match[0]}`)
      }
    }
    expect(unknown).toEqual([])
  })
})
