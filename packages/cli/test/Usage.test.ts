// The command line itself, no database needed: usage errors exit 2 with the usage, a
// database that cannot be reached exits 3 in one line, and neither ever prints a secret.
import { describe, expect, it } from "@effect/vitest"
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { PACKAGE, runCli } from "./support.js"

const REPOSITORY = join(PACKAGE, "..", "..")

const USAGE = "Usage: effect-durable"

describe("effect-durable usage", () => {
  it("--help and --version print on stdout and exit 0", async () => {
    const help = await runCli(["--help"])
    expect(help.code).toBe(0)
    for (
      const command of [
        "migrate",
        "verify",
        "status",
        "dead-letters",
        "purge",
        "explain",
        "grant",
        "ledger",
        "pause",
        "resume",
        "doctor",
        "dashboard",
        "dev-database"
      ]
    ) {
      expect(help.stdout).toContain(command)
    }
    expect(help.stdout).not.toMatch(/\x1b\[/) // no colour in a pipe
    const version = await runCli(["--version"])
    expect(version).toMatchObject({ code: 0, stderr: "" })
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/)
    const sub = await runCli(["dead-letters", "redrive", "--help"])
    expect(sub.code).toBe(0)
    expect(sub.stdout).toContain("--yes")
  })

  it("every command's help names what each value is, says each default, marks what is required, and has no filler text", async () => {
    const commands = [
      [],
      ["migrate"],
      ["verify"],
      ["status"],
      ["dead-letters", "list"],
      ["dead-letters", "show"],
      ["dead-letters", "redrive"],
      ["dead-letters", "discard"],
      ["purge"],
      ["explain"],
      ["grant"],
      ["ledger", "show"],
      ["pause"],
      ["resume"],
      ["doctor"],
      ["dashboard"],
      ["dev-database"],
      ["schedules", "backfill"],
      ["limits", "set"],
      ["limits", "group"]
    ]
    const helps = await Promise.all(commands.map((command) => runCli([...command, "--help"])))
    const help = new Map(commands.map((command, i) => [command.join(" "), helps[i]!.stdout]))
    for (const [i, result] of helps.entries()) expect(result.code, commands[i]!.join(" ")).toBe(0)
    for (const [command, text] of help) {
      // effect/cli's placeholders: a value's type instead of what it is, its stock description of a secret.
      expect(text, command).not.toMatch(/^\s+(--[\w-]+|\w+) (string|integer|choice)\b/m)
      expect(text, command).not.toMatch(/confidential|user-defined/i)
    }
    expect(help.get("")).toContain("Every flag is optional unless its help says Required")
    expect(help.get("")).toMatch(/--dev\s+Use the project's development database/)
    expect(help.get("purge")).toMatch(/--older-than DURATION\s+Required\./)
    expect(help.get("dead-letters redrive")).toMatch(/--all\s+.*\(this or --id is required\)/)
    expect(help.get("status")).toMatch(/--interval DURATION\s+.*\(default 2s\)/)
    expect(help.get("dashboard")).toMatch(/--port PORT\s+.*default 8080/)
    expect(help.get("dashboard")).toMatch(/--host HOST\s+.*default 127\.0\.0\.1/)
    expect(help.get("dashboard")).toMatch(/--statement-timeout DURATION\s+.*default 5s/)
    expect(help.get("dead-letters list")).toMatch(/--limit N\s+.*default 50/)
    expect(help.get("schedules backfill")).toMatch(/--from TIME\s+Required\./)
    expect(help.get("limits set")).toMatch(/--max N\s+At most N/)
  })

  it("a bad command, flag, value or a missing argument exits 2 with what is wrong and the usage", async () => {
    const cases: ReadonlyArray<readonly [ReadonlyArray<string>, string]> = [
      [["statu"], "Unknown subcommand \"statu\""],
      [["migrate", "--dry-rn"], "--dry-rn"],
      [["ledger", "show", "a", "b"], "Missing required argument: key"],
      [["dead-letters", "redrive", "--id", "x"], "--id expects a message id"],
      [["purge", "outbox"], "--older-than"],
      [["purge", "queue", "--older-than", "7d"], "outbox"],
      [["dead-letters", "list", "--older-than", "soon"], "--older-than expects a duration"],
      [["status", "--interval", "fast"], "--interval expects a duration"]
    ]
    const results = await Promise.all(cases.map(([args]) => runCli(args)))
    for (const [[args, message], result] of cases.map((c, i) => [c, results[i]!] as const)) {
      expect(result.code, args.join(" ")).toBe(2)
      expect(result.stdout, args.join(" ")).toBe("")
      expect(result.stderr, args.join(" ")).toContain(message)
      expect(result.stderr, args.join(" ")).toContain(USAGE)
    }
  })

  it("a command group or the root without a subcommand exits 2 naming the choices", async () => {
    const root = await runCli([])
    expect(root.code).toBe(2)
    expect(root.stderr).toContain("name a command")
    const group = await runCli(["dead-letters"])
    expect(group.code).toBe(2)
    expect(group.stderr).toContain("list, show, redrive or discard")
  })

  it("without a database URL (and no development database in the folder) a command exits 2 saying how to give one", async () => {
    // A folder of its own: the repository may hold a development database (npm start makes one).
    const cwd = mkdtempSync(join(tmpdir(), "effect-durable-nourl-"))
    const result = await runCli(["status"], { cwd })
    expect(result).toMatchObject({ code: 2, stdout: "" })
    expect(result.stderr.trim()).toBe(
      "effect-durable: no database: pass --database-url <url>, set DATABASE_URL, or run it in a project that has a development database (--dev)"
    )
    const empty = await runCli(["status"], { cwd, env: { DATABASE_URL: "" } })
    rmSync(cwd, { recursive: true, force: true })
    expect(empty.code).toBe(2)
    const bad = await runCli(["status"], { env: { DATABASE_URL: "mysql://nope" } })
    expect(bad.code).toBe(2)
    expect(bad.stderr).toContain("invalid DATABASE_URL")
  })

  it("an unreachable database exits 3 in one line and never prints the password, even with --verbose", async () => {
    const url = "postgres://operator:s3cret-Pa55word@127.0.0.1:1/app"
    const [result, fromEnv, verbose] = await Promise.all([
      runCli(["--database-url", url, "status"]),
      runCli(["status", "--json"], { env: { DATABASE_URL: url } }),
      runCli(["--verbose", "--database-url", url, "doctor"])
    ])
    expect(result).toMatchObject({ code: 3, stdout: "" })
    // The password on the command line is warned about; the failure is one line.
    const lines = result.stderr.trim().split("\n")
    expect(lines).toHaveLength(2)
    expect(lines[0]).toMatch(/^effect-durable: warning: --database-url puts the password on the command line/)
    expect(lines[1]).toMatch(/^effect-durable: cannot reach the database: .*ECONNREFUSED/)
    expect(fromEnv.code).toBe(3)
    expect(fromEnv.stderr.trim().split("\n")).toHaveLength(1)
    expect(verbose.code).toBe(3)
    expect(verbose.stderr).toContain("cause:")
    for (const output of [result, fromEnv, verbose]) {
      expect(output.stdout + output.stderr).not.toContain("s3cret-Pa55word")
      expect(output.stderr).not.toMatch(/\n\s+at /) // no stack trace
    }
  })

  it("--database-url warns that its password shows on the command line; DATABASE_URL and --database-url-file do not", async () => {
    const url = "postgres://operator:s3cret-Pa55word@127.0.0.1:1/app"
    const dir = mkdtempSync(join(tmpdir(), "effect-durable-url-"))
    const file = join(dir, "database-url")
    writeFileSync(file, `${url}\n`, { mode: 0o600 })
    try {
      const [flag, env, fromFile, noPassword, both, missing] = await Promise.all([
        runCli(["--database-url", url, "status"]),
        runCli(["status"], { env: { DATABASE_URL: url } }),
        runCli(["--database-url-file", file, "status"]),
        runCli(["--database-url", "postgres://operator@127.0.0.1:1/app", "status"]),
        runCli(["--database-url", url, "--database-url-file", file, "status"]),
        runCli(["--database-url-file", join(dir, "nothing-here"), "status"])
      ])
      const WARNING =
        /^effect-durable: warning: --database-url puts the password on the command line, where other users of this machine can read it \(ps, \/proc\/<pid>\/cmdline\): set DATABASE_URL, or pass --database-url-file <path>/m
      expect(flag.stderr).toMatch(WARNING)
      expect(flag.stderr.match(/warning/g)).toHaveLength(1)
      for (const quiet of [env, fromFile, noPassword]) expect(quiet.stderr).not.toContain("warning")
      // The file's URL is used (the database there does not answer: 3), and never printed.
      expect(fromFile.code).toBe(3)
      expect(fromFile.stderr).toMatch(/^effect-durable: cannot reach the database: .*ECONNREFUSED/)
      expect(both.code).toBe(2)
      expect(both.stderr).toContain("pass --database-url or --database-url-file, not both")
      expect(missing.code).toBe(2)
      expect(missing.stderr).toContain("--database-url-file")
      for (const output of [flag, env, fromFile, noPassword, both, missing]) {
        expect(output.stdout + output.stderr).not.toContain("s3cret-Pa55word")
      }
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })

  it("a bad library variable is named, with what it is for", async () => {
    const result = await runCli(["status"], {
      env: { DATABASE_URL: "postgres://u:p@127.0.0.1:1/db", DURABLE_POOL_SIZE: "lots" }
    })
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("DURABLE_POOL_SIZE")
  })

  it("npm run cli runs the repository's command where it is typed, for contributors (no npx link needed)", async () => {
    const cwd = mkdtempSync(join(tmpdir(), "effect-durable-npm-run-"))
    const npm = (args: ReadonlyArray<string>) =>
      new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
        const { DATABASE_URL: _url, ...env } = process.env
        const child = spawn("npm", ["run", "--silent", "--prefix", REPOSITORY, "cli", "--", ...args], { cwd, env })
        let stdout = ""
        let stderr = ""
        child.stdout.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk))
        child.stderr.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk))
        child.on("error", reject)
        child.on("close", (code) => resolve({ code, stdout, stderr }))
      })
    try {
      const version = await npm(["--version"])
      expect(version.code).toBe(0)
      expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+$/)
      // It runs in the folder it was typed in (no development database there), not the repository's root.
      const status = await npm(["status"])
      expect(status.code).toBe(2)
      expect(status.stderr).toContain("effect-durable: no database:")
    } finally {
      rmSync(cwd, { recursive: true, force: true })
    }
  })

  it("--wizard without a terminal is refused instead of waiting forever", async () => {
    const result = await runCli(["--wizard"])
    expect(result.code).toBe(2)
    expect(result.stderr).toContain("--wizard needs a terminal")
  })
})
