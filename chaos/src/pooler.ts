/**
 * PgBouncer for `--pooler` runs, through the repository's scripts/pgbouncer.sh (one source
 * for its configuration): transaction pooling, auth_query, a wildcard database, its files in
 * the run directory. Its pid goes to the guardian like every other process of the run.
 */
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { dirname, join } from "node:path"
import { fileURLToPath } from "node:url"
import type { RunDirectory } from "./children.js"

const SCRIPT = join(dirname(fileURLToPath(import.meta.url)), "..", "..", "scripts", "pgbouncer.sh")

export interface Pooler {
  /** `url` with host and port of the pooler. */
  readonly url: string
  readonly stop: () => Promise<void>
}

const script = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv): Promise<string> =>
  new Promise((resolve, reject) =>
    execFile(
      SCRIPT,
      [...args],
      { env: { ...process.env, ...env } },
      (error, stdout, stderr) =>
        error === null
          ? resolve(stdout.trim())
          : reject(new Error(`pgbouncer.sh ${args[0]}: ${stderr || error.message}`))
    )
  )

/** Starts PgBouncer in front of the server of `url` (a superuser URL). */
export const start = async (run: RunDirectory, url: string): Promise<Pooler> => {
  // No port of ours: the script takes a free one and retries if something binds it first.
  const env = { PGBOUNCER_STATE: join(run.path, "pgbouncer") }
  const pooled = await script(["start", url], env)
  run.remember(Number(readFileSync(join(env.PGBOUNCER_STATE, "pgbouncer.pid"), "utf8").trim()))
  return { url: pooled, stop: () => script(["stop"], env).then(() => undefined) }
}
