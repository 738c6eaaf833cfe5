/**
 * A detached shell that outlives nothing: it watches this process and, once it is gone for
 * any reason (normal exit, SIGTERM, SIGKILL), stops the server it guards and — for a
 * throwaway server — deletes the server's directory. Normal release does the same at once
 * and dismisses the guardian.
 *
 * @since 0.1.0
 */
import { type ChildProcess, spawn } from "node:child_process"

const SCRIPT = `
parent=$1; dir=$2; target=$3; keep=$4
while kill -0 "$parent" 2>/dev/null; do sleep 0.2; done
if [ "$target" = postmaster ]; then
  target=$(head -n 1 "$dir/data/postmaster.pid" 2>/dev/null)
  # Data to keep gets a fast shutdown (a clean checkpoint); throwaway data an immediate one.
  if [ "$keep" = keep ]; then signal=INT; rounds=600; else signal=QUIT; rounds=100; fi
else
  signal=TERM; rounds=100
fi
if [ -n "$target" ]; then
  kill -$signal "$target" 2>/dev/null
  i=0
  while kill -0 "$target" 2>/dev/null && [ $i -lt $rounds ]; do sleep 0.1; i=$((i+1)); done
  if [ "$keep" = keep ]; then kill -QUIT "$target" 2>/dev/null; else kill -KILL "$target" 2>/dev/null; fi
fi
[ "$keep" = keep ] || rm -rf "$dir"
`

export interface GuardianOptions {
  /** Keep `dir` (a persistent server's data): stop the server gently and delete nothing. */
  readonly keep?: boolean
}

/**
 * Guards `dir` and the server process `target`: a pid, or "postmaster" for the PostgreSQL
 * whose pid is in `dir/data/postmaster.pid` (read when needed, so a restart is followed).
 * Dismiss it with `guardian.kill("SIGTERM")` once the server is stopped.
 */
export const spawnGuardian = (
  dir: string,
  target: number | "postmaster",
  options: GuardianOptions = {}
): ChildProcess => {
  const guardian = spawn(
    "sh",
    ["-c", SCRIPT, "guardian", String(process.pid), dir, String(target), options.keep === true ? "keep" : "delete"],
    { detached: true, stdio: "ignore" }
  )
  guardian.unref()
  return guardian
}
