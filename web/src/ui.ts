// The page's small DOM helpers and IO/SOL formatting (exact: bigint base units, no floats).
export const IO_DECIMALS = 6;

export function formatIo(units: bigint): string {
  const negative = units < 0n;
  const abs = negative ? -units : units;
  const whole = abs / 10n ** BigInt(IO_DECIMALS);
  const frac = (abs % 10n ** BigInt(IO_DECIMALS)).toString().padStart(IO_DECIMALS, "0").replace(/0+$/, "");
  return `${negative ? "-" : ""}${whole.toLocaleString("en-US")}${frac ? "." + frac : ""} IO`;
}

export function formatSol(lamports: bigint): string {
  const frac = (lamports % 1_000_000_000n).toString().padStart(9, "0").replace(/0+$/, "");
  return `${lamports / 1_000_000_000n}${frac ? "." + frac : ""} SOL`;
}

// A chain time (unix seconds) as the pages show it, in UTC.
export function formatTime(unix: number): string {
  return new Date(unix * 1000).toISOString().replace(".000Z", " UTC");
}

// "12.5" -> 12_500_000n; a bad amount throws with a message for the form.
export function parseIo(text: string, what: string): bigint {
  const match = /^\s*(\d+)(?:\.(\d+))?\s*$/.exec(text);
  if (!match || (match[2]?.length ?? 0) > IO_DECIMALS) {
    throw new Error(`${what}: an amount of IO with at most ${IO_DECIMALS} decimals, e.g. 12.5`);
  }
  const units = BigInt(match[1]!) * 10n ** BigInt(IO_DECIMALS) + BigInt((match[2] ?? "").padEnd(IO_DECIMALS, "0"));
  if (units <= 0n || units >= 1n << 64n) throw new Error(`${what}: a positive amount that fits a token account`);
  return units;
}

export function parseWhole(text: string, what: string, low: bigint, high: bigint): bigint {
  if (!/^\s*\d+\s*$/.test(text)) throw new Error(`${what}: a whole number`);
  const value = BigInt(text.trim());
  if (value < low || value > high) throw new Error(`${what}: from ${low} to ${high}`);
  return value;
}

export function $<T extends HTMLElement = HTMLElement>(selector: string): T {
  const found = document.querySelector<T>(selector);
  if (!found) throw new Error(`the page lacks ${selector}`);
  return found;
}

export function input(name: string): string {
  return $<HTMLInputElement | HTMLSelectElement>(`[name="${name}"]`).value;
}

// One message area: role=alert for errors (read out at once), role=status for news.
export function say(text: string, kind: "error" | "notice" | "ok" = "notice"): void {
  const box = $("#message");
  box.className = kind === "error" ? "error" : kind === "ok" ? "card ok" : "notice";
  box.setAttribute("role", kind === "error" ? "alert" : "status");
  box.textContent = text;
  box.hidden = false;
}

export function hideMessage(): void {
  const box = $("#message");
  box.hidden = true;
  box.textContent = ""; // an earlier message never stands for a later outcome
}

// A button's handler: the message area cleared, then any failure said in it.
export function guard(action: () => Promise<void>): () => void {
  return () => {
    hideMessage();
    action().catch((e) => say((e as Error).message, "error"));
  };
}

export function clear(element: HTMLElement): void {
  while (element.firstChild) element.removeChild(element.firstChild);
}

export function el(tag: string, text = "", attrs: Record<string, string> = {}): HTMLElement {
  const e = document.createElement(tag);
  e.textContent = text;
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}
