// `effect-durable dashboard` as a process: it serves the page and its health endpoints,
// refuses to listen beyond loopback without credentials, asks for them when they are set,
// and stops on Ctrl-C. (The page itself is driven in a real browser by Browser.test.ts.)
import { describe, expect, it } from "@effect/vitest"
import * as Effect from "effect/Effect"
import { request as httpRequest } from "node:http"
import { cliOn, databaseUrl, type Result, runCli, Substrate } from "./support.js"

/** A GET with another Host header (fetch may not set it): what a DNS-rebound page would send. */
const statusWithHost = (url: string, host: string) =>
  new Promise<number>((resolve, reject) => {
    const request = httpRequest(url, { headers: { host } }, (response) => {
      response.resume()
      resolve(response.statusCode ?? 0)
    })
    request.on("error", reject)
    request.end()
  })

/** Starts the dashboard, waits for the address it prints, runs `use`, then Ctrl-C. */
const withDashboard = <A>(args: ReadonlyArray<string>, env: Record<string, string>, use: (url: string) => Promise<A>) =>
  Effect.flatMap(databaseUrl, (database) =>
    Effect.promise(async () => {
      let resolveUrl: (url: string) => void = () => {}
      const url = new Promise<string>((resolve) => (resolveUrl = resolve))
      let stop: () => void = () => {}
      const finished: Promise<Result> = runCli(["--database-url", database, "dashboard", "--port", "0", ...args], {
        env,
        onStderr: (stderr, child) => {
          stop = () => child.kill("SIGINT")
          const found = /effect-durable dashboard: (http:\/\/\S+)/.exec(stderr)
          if (found !== null) resolveUrl(found[1]!)
        }
      })
      const used = await Promise.race([
        url.then(use),
        finished.then((r) => Promise.reject(new Error(`dashboard ended: ${r.stderr}`)))
      ])
      stop()
      return { used, result: await finished }
    }))

/** Runs the dashboard to its end: stopped at once (Ctrl-C) if it starts serving, so a test never hangs on one that should not have started. */
const startOrEnd = (args: ReadonlyArray<string>, env: Record<string, string>) =>
  Effect.flatMap(databaseUrl, (database) =>
    Effect.promise(async () => {
      let started = false
      const result = await runCli(["dashboard", "--port", "0", ...args], {
        env: { DATABASE_URL: database, ...env },
        onStderr: (stderr, child) => {
          if (!started && /effect-durable dashboard: http:\/\//.test(stderr)) {
            started = true
            child.kill("SIGINT")
          }
        }
      })
      return { started, result }
    }))

describe("effect-durable dashboard", () => {
  it.layer(Substrate, { timeout: "120 seconds" })((it) => {
    it.effect("without credentials it serves on loopback only: the page, the health endpoints, loopback Host names", () =>
      Effect.gen(function*() {
        const { result, used } = yield* withDashboard([], {}, async (url) => {
          const page = await fetch(url)
          const live = await fetch(`${url}health/live`)
          const ready = await fetch(`${url}health/ready`)
          const rebound = await statusWithHost(url, "attacker.example")
          return {
            url,
            page: page.status,
            html: await page.text(),
            csp: page.headers.get("content-security-policy"),
            live: await live.json(),
            ready: await ready.json(),
            rebound
          }
        })
        expect(used.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/$/)
        expect(used.page).toBe(200)
        expect(used.html).toContain("<title>Overview · effect-durable</title>")
        expect(used.csp).toContain("script-src 'self'")
        expect(used.live).toEqual({ status: "live" })
        expect(used.ready).toMatchObject({ status: "ready" })
        expect(used.rebound).toBe(403)
        expect(result.code).toBe(130)
      }))

    it.effect("it refuses to listen beyond loopback without credentials (exit 2)", () =>
      Effect.gen(function*() {
        const result = yield* cliOn(["dashboard", "--host", "0.0.0.0", "--port", "0"])
        expect(result.code).toBe(2)
        expect(result.stderr).toContain("refusing to listen on 0.0.0.0 without credentials")
        const half = yield* cliOn(["dashboard", "--port", "0"], { env: { DURABLE_DASHBOARD_USER: "ops" } })
        expect(half.code).toBe(2)
        expect(half.stderr).toContain("set both DURABLE_DASHBOARD_USER and DURABLE_DASHBOARD_PASSWORD")
      }))

    it.effect("an empty, blank or short dashboard secret stops it at start (exit 2) naming the variable, never a page without credentials", () =>
      Effect.gen(function*() {
        const cases: ReadonlyArray<readonly [ReadonlyArray<string>, Record<string, string>, string]> = [
          [[], { DURABLE_DASHBOARD_TOKEN: "" }, "DURABLE_DASHBOARD_TOKEN"],
          [["--host", "0.0.0.0"], { DURABLE_DASHBOARD_TOKEN: "" }, "DURABLE_DASHBOARD_TOKEN"],
          [[], { DURABLE_DASHBOARD_TOKEN: "                    " }, "DURABLE_DASHBOARD_TOKEN"],
          [[], { DURABLE_DASHBOARD_TOKEN: "tok-short" }, "DURABLE_DASHBOARD_TOKEN"],
          [[], { DURABLE_DASHBOARD_USER: "ops", DURABLE_DASHBOARD_PASSWORD: "" }, "DURABLE_DASHBOARD_PASSWORD"],
          [
            ["--host", "0.0.0.0"],
            { DURABLE_DASHBOARD_USER: "ops", DURABLE_DASHBOARD_PASSWORD: "hunter2" },
            "DURABLE_DASHBOARD_PASSWORD"
          ],
          [
            [],
            { DURABLE_DASHBOARD_USER: "", DURABLE_DASHBOARD_PASSWORD: "correct-horse-battery" },
            "DURABLE_DASHBOARD_USER"
          ],
          [[], { DURABLE_DASHBOARD_READ_ONLY: "" }, "DURABLE_DASHBOARD_READ_ONLY"]
        ]
        for (const [args, env, variable] of cases) {
          const { result, started } = yield* startOrEnd(args, env)
          const name = `${args.join(" ")} ${JSON.stringify(env)}`
          expect(started, name).toBe(false)
          expect(result.code, name).toBe(2)
          expect(result.stderr, name).toContain(`effect-durable: invalid ${variable}: `)
          expect(result.stderr, name).not.toContain("tok-short")
          expect(result.stderr, name).not.toContain("hunter2")
        }
        const { result } = yield* startOrEnd([], { DURABLE_DASHBOARD_TOKEN: "tok-short" })
        expect(result.stderr).toContain("at least 16 characters")
      }))

    it.effect("--host 127.255.255.254 answers to its own address as Host, and still refuses other names", () =>
      Effect.gen(function*() {
        const { result, used } = yield* withDashboard(["--host", "127.255.255.254"], {}, async (url) => {
          const own = await fetch(url)
          return {
            url,
            own: own.status,
            rebound: await statusWithHost(url, "attacker.example"),
            loopback: await statusWithHost(url, "localhost")
          }
        })
        expect(used.url).toMatch(/^http:\/\/127\.255\.255\.254:\d+\/$/)
        expect(used).toMatchObject({ own: 200, rebound: 403, loopback: 200 })
        expect(result.code).toBe(130)
      }))

    it.effect("with credentials from the environment it asks for them (401), takes basic and bearer, and never prints them", () =>
      Effect.gen(function*() {
        const env = {
          DURABLE_DASHBOARD_USER: "ops",
          DURABLE_DASHBOARD_PASSWORD: "correct-horse-battery",
          DURABLE_DASHBOARD_TOKEN: "tok-0123456789abcdef"
        }
        const { result, used } = yield* withDashboard(["--host", "0.0.0.0", "--read-only"], env, async (url) => {
          const local = url.replace("0.0.0.0", "127.0.0.1")
          const anonymous = await fetch(local)
          const wrong = await fetch(local, {
            headers: { authorization: `Basic ${Buffer.from("ops:nope").toString("base64")}` }
          })
          const basic = await fetch(local, {
            headers: { authorization: `Basic ${Buffer.from("ops:correct-horse-battery").toString("base64")}` }
          })
          const bearer = await fetch(`${local}api/stats`, { headers: { authorization: "Bearer tok-0123456789abcdef" } })
          const write = await fetch(`${local}actions/pause`, {
            method: "POST",
            headers: { authorization: "Bearer tok-0123456789abcdef", "content-type": "application/json" },
            body: JSON.stringify({ topic: "orders" })
          })
          return {
            anonymous: anonymous.status,
            challenge: anonymous.headers.get("www-authenticate"),
            wrong: wrong.status,
            basic: basic.status,
            bearer: bearer.status,
            write: write.status
          }
        })
        expect(used).toEqual({
          anonymous: 401,
          challenge: "Basic realm=\"effect-durable\", charset=\"UTF-8\"",
          wrong: 401,
          basic: 200,
          bearer: 200,
          write: 403
        })
        expect(result.stderr).toContain("credentials required, read-only")
        expect(result.stderr).not.toContain("correct-horse-battery")
        expect(result.stderr).not.toContain("tok-0123456789abcdef")
      }))
  })
})
