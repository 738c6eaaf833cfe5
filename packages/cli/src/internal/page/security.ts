/**
 * Who may use the admin page, and how: credentials (HTTP basic or a bearer token, held as
 * `Redacted`, at least `MIN_SECRET_LENGTH` characters, compared in constant time, the header
 * read whole: nothing may follow them), an optional Host allow-list (a page without
 * credentials on loopback refuses other Host names: no DNS rebinding), a read-only switch
 * (403 on every write), writes only as same-origin JSON POSTs (`Sec-Fetch-Site`, then
 * `Origin`, checked: no CSRF), and no cross-site reads but navigations (another site's
 * `<img>` or `<script>` cannot make the page run its queries). Every response carries a
 * strict Content-Security-Policy.
 */
import * as Effect from "effect/Effect"
import type * as HttpServerRequest from "effect/http/HttpServerRequest"
import * as HttpServerResponse from "effect/http/HttpServerResponse"
import * as Option from "effect/Option"
import * as Redacted from "effect/Redacted"
import * as Schema from "effect/Schema"
import { createHash, timingSafeEqual } from "node:crypto"

export interface Auth {
  /** HTTP basic: what a browser asks for. */
  readonly basic?: { readonly user: string; readonly password: Redacted.Redacted<string> }
  /** `Authorization: Bearer <token>`: for scripts, or a proxy that adds it. */
  readonly bearer?: Redacted.Redacted<string>
}

export interface Policy {
  readonly auth: Auth | undefined
  readonly readOnly: boolean
  /** Host names the page answers to (any port); `undefined`: any. */
  readonly allowedHosts: ReadonlyArray<string> | undefined
  /** Who is acting, from the host application's own authentication. */
  readonly operator: ((request: HttpServerRequest.HttpServerRequest) => Effect.Effect<string | undefined>) | undefined
}

export type Verdict =
  | { readonly _tag: "Allowed"; readonly who: string }
  | { readonly _tag: "Denied"; readonly status: number; readonly message: string; readonly challenge?: string }

const denied = (status: number, message: string, challenge?: string): Verdict =>
  challenge === undefined ? { _tag: "Denied", status, message } : { _tag: "Denied", status, message, challenge }

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()
/** Equal in constant time (over digests: the lengths never leak). */
export const sameSecret = (given: string, expected: string): boolean => timingSafeEqual(digest(given), digest(expected))

/** The shortest password or token the page accepts: a guessable secret is no credential. */
export const MIN_SECRET_LENGTH = 16

/** The rule a password meets (the browser sends any text). */
export const PASSWORD_RULE = `at least ${MIN_SECRET_LENGTH} characters, not only spaces, without control characters`
/** The rule a bearer token meets: what `Authorization: Bearer` can carry (RFC 6750's b64token). */
export const TOKEN_RULE = `at least ${MIN_SECRET_LENGTH} characters of A-Z a-z 0-9 - . _ ~ + / (then = at the end)`
/** The rule a basic user name meets: basic credentials are `user:password`. */
export const USER_RULE = "a non-empty name without ':' or control characters"

const CONTROLS = /[\u0000-\u001f\u007f-\u009f]/
const TOKEN68 = /^[A-Za-z0-9\-._~+/]+=*$/

export const isPassword = (text: string): boolean =>
  text.length >= MIN_SECRET_LENGTH && text.trim().length > 0 && !CONTROLS.test(text)
export const isToken = (text: string): boolean => text.length >= MIN_SECRET_LENGTH && TOKEN68.test(text)
export const isUser = (text: string): boolean => text.length > 0 && !text.includes(":") && !CONTROLS.test(text)

const rule = (holds: (text: string) => boolean, message: string) =>
  Schema.String.check(Schema.makeFilter((text: string) => (holds(text) ? undefined : message), { message }))

/** `Auth` as plain text, decoded by `AdminPage.make` (the secrets unwrapped only to be checked). */
export const AuthSchema = Schema.Struct({
  basic: Schema.optional(Schema.Struct({ user: rule(isUser, USER_RULE), password: rule(isPassword, PASSWORD_RULE) })),
  bearer: Schema.optional(rule(isToken, TOKEN_RULE))
})

/** What `AuthSchema` decodes: the secrets' text, never kept. */
export const authText = (auth: Auth) => ({
  ...(auth.basic === undefined
    ? {}
    : { basic: { user: auth.basic.user, password: Redacted.value(auth.basic.password) } }),
  ...(auth.bearer === undefined ? {} : { bearer: Redacted.value(auth.bearer) })
})

/** `localhost:8080` -> `localhost`, `[::1]:8080` -> `[::1]`, lowercased: a Host header's name. */
export const hostName = (host: string): string => {
  const bracket = /^\[([^\]]+)\](?::\d+)?$/.exec(host)
  if (bracket !== null) return `[${bracket[1]!.toLowerCase()}]`
  return host.replace(/:\d+$/, "").toLowerCase()
}

/** The names a loopback-only page answers to. */
export const LOOPBACK_HOSTS: ReadonlyArray<string> = ["localhost", "127.0.0.1", "[::1]"]

/**
 * `Authorization: <scheme> <credentials>`, read whole: one scheme, one token68 and nothing
 * after it (`Bearer TOKEN junk` is no credential), basic credentials in canonical base64.
 */
const CREDENTIALS = /^([A-Za-z]+) +([A-Za-z0-9\-._~+/]+=*)$/

const authenticate = (auth: Auth, header: string | undefined): string | undefined => {
  if (header === undefined) return undefined
  const parsed = CREDENTIALS.exec(header.trim())
  if (parsed === null) return undefined
  const scheme = parsed[1]!.toLowerCase()
  const value = parsed[2]!
  if (auth.basic !== undefined && scheme === "basic") {
    const bytes = Buffer.from(value, "base64")
    // Node's decoder skips what is not base64; only the canonical text of the bytes counts.
    if (bytes.toString("base64") !== value) return undefined
    const decoded = bytes.toString("utf8")
    const colon = decoded.indexOf(":")
    if (colon === -1) return undefined
    const user = decoded.slice(0, colon)
    const password = decoded.slice(colon + 1)
    // Both compared, always: the time does not tell which one was wrong.
    const userOk = sameSecret(user, auth.basic.user)
    const passwordOk = sameSecret(password, Redacted.value(auth.basic.password))
    return userOk && passwordOk ? user : undefined
  }
  if (auth.bearer !== undefined && scheme === "bearer") {
    return sameSecret(value, Redacted.value(auth.bearer)) ? "bearer token" : undefined
  }
  return undefined
}

/**
 * A read another site's page makes the browser send: an `<img>`, `<script>`, `<iframe>` or
 * `fetch` from elsewhere (`Sec-Fetch-Site: cross-site` or `same-site`), anything but a
 * top-level navigation (a link followed to the page). Browsers that send no `Sec-Fetch-*`
 * headers, and scripts, are not refused: credentials are their barrier.
 */
const crossSiteRead = (headers: HttpServerRequest.HttpServerRequest["headers"]): string | undefined => {
  const site = headers["sec-fetch-site"]
  if (site !== "cross-site" && site !== "same-site") return undefined
  const mode = headers["sec-fetch-mode"]
  const dest = headers["sec-fetch-dest"]
  return mode === "navigate" && (dest === undefined || dest === "document")
    ? undefined
    : `cross-site request refused (Sec-Fetch-Site: ${site}, Sec-Fetch-Mode: ${mode ?? "missing"}): open the page itself`
}

/** Decides whether a request may go on, and who makes it. */
export const check = (
  policy: Policy,
  request: HttpServerRequest.HttpServerRequest,
  kind: "health" | "read" | "write"
): Effect.Effect<Verdict> =>
  Effect.gen(function*() {
    const headers = request.headers
    if (policy.allowedHosts !== undefined && kind !== "health") {
      const host = hostName(headers["host"] ?? "")
      if (!policy.allowedHosts.includes(host)) {
        return denied(
          403,
          `this page answers to ${policy.allowedHosts.join(", ")} only (Host ${host === "" ? "missing" : host})`
        )
      }
    }
    if (kind === "health") return { _tag: "Allowed", who: "health check" } as const
    let who = "anonymous"
    if (policy.auth !== undefined) {
      const user = authenticate(policy.auth, headers["authorization"])
      if (user === undefined) {
        return denied(
          401,
          "authentication required",
          policy.auth.basic !== undefined
            ? "Basic realm=\"effect-durable\", charset=\"UTF-8\""
            : "Bearer realm=\"effect-durable\""
        )
      }
      who = user
    }
    if (policy.operator !== undefined) who = (yield* policy.operator(request)) ?? who
    if (kind === "read") {
      const refused = crossSiteRead(headers)
      if (refused !== undefined) return denied(403, refused)
    }
    if (kind === "write") {
      if (policy.readOnly) return denied(403, "the admin page is read-only")
      const site = headers["sec-fetch-site"]
      if (site !== undefined && site !== "same-origin") {
        return denied(403, `cross-site request refused (Sec-Fetch-Site: ${site})`)
      }
      const origin = headers["origin"]
      if (site === undefined && origin !== undefined) {
        let originHost = ""
        try {
          originHost = new URL(origin).host.toLowerCase()
        } catch {
          // An opaque origin ("null") is not ours.
        }
        if (originHost !== (headers["host"] ?? "").toLowerCase()) {
          return denied(403, "cross-origin request refused (Origin)")
        }
      }
      if (!(headers["content-type"] ?? "").toLowerCase().startsWith("application/json")) {
        return denied(415, "actions are JSON: Content-Type: application/json")
      }
    }
    return { _tag: "Allowed", who } as const
  })

/** Where a request came from, for the log of operator actions. */
export const addressOf = (request: HttpServerRequest.HttpServerRequest): string =>
  Option.getOrElse(request.remoteAddress, () => "unknown")

/** The headers every response of the page carries. */
export const SECURITY_HEADERS: Readonly<Record<string, string>> = {
  "content-security-policy":
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
  "x-content-type-options": "nosniff",
  "x-frame-options": "DENY",
  // Filter values live in URLs: never send them to another site.
  "referrer-policy": "no-referrer",
  "cache-control": "no-store"
}

export const secured = (response: HttpServerResponse.HttpServerResponse) =>
  HttpServerResponse.setHeaders(response, SECURITY_HEADERS)
