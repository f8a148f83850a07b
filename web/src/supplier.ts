// The supplier's page (/web/app/supplier): stake, unstake (request), withdraw once unbonded, and the
// wallet's nodes with their earnings and faults (linked to the explorer's node and provider pages).
import { stake, unstake, withdraw } from "./actions";
import { type Session, start } from "./session";
import { run } from "./signing";
import { $, clear, el, formatIo, hideMessage, input, parseIo, say } from "./ui";

let session: Session;

async function showProvider(s: Session): Promise<void> {
  const p = s.state!.provider;
  $("#staked").textContent = p ? formatIo(BigInt(p.staked)) : "no provider yet";
  $("#bonded").textContent = p ? formatIo(BigInt(p.bonded)) : "-";
  $("#unbonding").textContent = p ? formatIo(BigInt(p.unbonding)) : "-";
  const ends = p && BigInt(p.unbonding) > 0n ? Number(p.unbonding_ends_at) : null;
  $("#unbonding-ends").textContent = ends === null ? "-" : new Date(ends * 1000).toISOString().replace(".000Z", " UTC");
  $<HTMLButtonElement>("#withdraw-button").disabled = ends === null || ends > Number(s.state!.now);
  if (p) $("#provider-link").setAttribute("href", `/web/providers/${p.provider}`);
  const rows = $("#nodes tbody");
  clear(rows);
  for (const n of s.state!.nodes as Record<string, any>[]) {
    const row = el("tr");
    const link = el("td");
    link.append(el("a", n.node, { href: `/web/nodes/${n.node}` }));
    row.append(
      link,
      el("td", String(n.gpu_count), { class: "num" }),
      el("td", formatIo(BigInt(n.earned)), { class: "num" }),
      el("td", String(n.faults), { class: "num" }),
      el("td", n.jailed ? "jailed" : "ok", { class: n.jailed ? "bad" : "ok" }),
    );
    rows.append(row);
  }
}

function guard(action: () => Promise<void>): () => void {
  return () => {
    hideMessage();
    action().catch((e) => say((e as Error).message, "error"));
  };
}

async function act(plan: Promise<import("./actions").Plan>): Promise<void> {
  if (await run(session.idl, session.connected!, session.program, await plan)) await (window as any).gpunetRefresh();
}

const REFRESH_MS = 3000; // the unbonding's end passes by itself: the withdraw button follows it

async function main(): Promise<void> {
  session = await start(showProvider);
  setInterval(() => {
    if (session.connected) (window as any).gpunetRefresh().catch(() => undefined);
  }, REFRESH_MS);
  $("#stake-button").onclick = guard(() => act(stake(session.context(), parseIo(input("stake_amount"), "Stake"))));
  $("#unstake-button").onclick = guard(() => act(unstake(session.context(), parseIo(input("unstake_amount"), "Unstake"))));
  $("#withdraw-button").onclick = guard(() =>
    act(withdraw(session.context(), BigInt(session.state!.provider?.unbonding ?? "0"))),
  );
}

main().catch((e) => say((e as Error).message, "error"));
