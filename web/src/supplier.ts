// The supplier's page (/web/app/supplier): stake, unstake (request), withdraw once unbonded, and the
// wallet's nodes with their earnings and faults (linked to the explorer's node and provider pages).
import { stake, unstake, withdraw } from "./actions";
import { act, type Session, start } from "./session";
import { $, clear, el, formatIo, formatTime, guard, input, parseIo, say } from "./ui";

let session: Session;

async function showProvider(s: Session): Promise<void> {
  const p = s.state!.provider;
  $("#staked").textContent = p ? formatIo(BigInt(p.staked)) : "no provider yet";
  $("#bonded").textContent = p ? formatIo(BigInt(p.bonded)) : "-";
  $("#unbonding").textContent = p ? formatIo(BigInt(p.unbonding)) : "-";
  const ends = p && BigInt(p.unbonding) > 0n ? Number(p.unbonding_ends_at) : null;
  $("#unbonding-ends").textContent = ends === null ? "-" : formatTime(ends);
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

const REFRESH_MS = 3000; // the unbonding's end passes by itself: the withdraw button follows it

async function main(): Promise<void> {
  session = await start(showProvider);
  setInterval(() => {
    if (session.connected) session.refresh().catch(() => undefined);
  }, REFRESH_MS);
  $("#stake-button").onclick = guard(async () =>
    act(session, await stake(session.context(), parseIo(input("stake_amount"), "Stake"))),
  );
  $("#unstake-button").onclick = guard(async () =>
    act(session, await unstake(session.context(), parseIo(input("unstake_amount"), "Unstake"))),
  );
  $("#withdraw-button").onclick = guard(async () =>
    act(session, await withdraw(session.context(), BigInt(session.state!.provider?.unbonding ?? "0"))),
  );
}

main().catch((e) => say((e as Error).message, "error"));
