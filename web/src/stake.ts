// The token holder's page (/web/app/stake): the pools (their supplier's own stake, what is delegated
// and the cap, the commission now and any change scheduled), the wallet's positions (value now,
// state, rewards to collect), and delegate, undelegate, withdraw and collect. The coordinator's
// figures are shown and choose what a button offers; every account a transaction names is derived
// from the form, the position's pool and nonce, and the wallet (actions.ts), and checked (check.ts).
import { address } from "@solana/kit";

import { collectRewards, delegate, type PositionFacts, undelegate, withdrawDelegation } from "./actions";
import { act, type Session, start, stateOf } from "./session";
import { $, clear, el, formatIo, formatTime, guard, input, parseIo, say } from "./ui";

type Json = Record<string, any>;

let session: Session;

const REFRESH_MS = 3000; // epochs end, unbonding ends and rewards are credited by themselves

// The co-staking state read again: what a button acts on is never older than its click.
async function readStake(): Promise<Json> {
  return stateOf(`/web/api/stake/${session.connected!.account.address}`);
}

const percent = (bps: number) => `${bps / 100} %`;

function commissionText(pool: Json): string {
  const later = (pool.scheduled_commission as Json[]).map(
    (c) => `${percent(c.commission_bps)} from epoch ${c.from_epoch} (${formatTime(c.from)})`,
  );
  return [percent(pool.commission_bps), ...later].join(", then ");
}

function stateText(p: Json): string {
  if (p.state === "active") return `active (earns from epoch ${p.earns_from_epoch})`;
  if (p.state === "unbonding") return `unbonding until ${formatTime(p.withdrawable_at)}`;
  if (p.state === "withdrawable") return `withdrawable since ${formatTime(p.withdrawable_at)}`;
  return `withdrawn (earned through epoch ${p.exit_epoch}, collected through ${p.rewards_collected_through_epoch})`;
}

function facts(p: Json): PositionFacts {
  return {
    provider: address(p.provider),
    nonce: BigInt(p.nonce),
    amount: BigInt(p.amount),
    exitEpoch: p.exit_epoch === null ? null : BigInt(p.exit_epoch),
    indexEpochs: (p.index_epochs as number[]).map((e) => BigInt(e)),
  };
}

// What collect_rewards would do for the position: pay it, or close it (withdrawn and credited through
// its exit epoch), as `gpunet stake collect` chooses.
function collectable(p: Json, pool: Json | undefined): boolean {
  if (p.rewards_to_collect === null) return false;
  const closes = p.state === "withdrawn" && pool !== undefined && pool.credited_through_epoch >= p.exit_epoch;
  return BigInt(p.rewards_to_collect) > 0n || closes;
}

// The position as the chain has it now (its pool and nonce from the row clicked).
async function position(provider: string, nonce: string): Promise<{ state: Json; p: Json }> {
  const state = await readStake();
  const p = (state.positions as Json[]).find((q) => q.provider === provider && q.nonce === nonce);
  if (!p) throw new Error(`You hold no position ${nonce} in the pool of provider ${provider} any more`);
  return { state, p };
}

function button(text: string, label: string, action: () => Promise<void>): HTMLElement {
  const b = el("button", text, { type: "button", "aria-label": label });
  b.onclick = guard(action);
  return b;
}

function showPools(state: Json): void {
  $("#epoch").textContent = String(state.epoch);
  $("#epoch-length").textContent = `${state.epoch_seconds} s`;
  const rows = $("#pools tbody");
  clear(rows);
  for (const pool of state.pools as Json[]) {
    const row = el("tr", "", { "data-pool": pool.provider });
    const link = el("td");
    link.append(el("a", pool.provider, { href: `/web/providers/${pool.provider}` }));
    const choose = el("td");
    choose.append(
      button("Choose", `Choose the pool of provider ${pool.provider}`, async () => {
        $<HTMLInputElement>("#delegate_pool").value = pool.provider;
        $("#delegate_amount").focus();
      }),
    );
    row.append(
      link,
      el("td", formatIo(BigInt(pool.own_stake)), { class: "num" }),
      el("td", formatIo(BigInt(pool.delegated)), { class: "num" }),
      el("td", `${formatIo(BigInt(pool.cap))} (${formatIo(BigInt(pool.room))} more fits)`, { class: "num" }),
      el("td", commissionText(pool), { class: "commission" }),
      choose,
    );
    rows.append(row);
  }
}

function showPositions(state: Json): void {
  const rows = $("#positions tbody");
  clear(rows);
  const positions = state.positions as Json[];
  $("#no-positions").hidden = positions.length > 0;
  for (const p of positions) {
    const pool = (state.pools as Json[]).find((q) => q.provider === p.provider);
    const which = `position ${p.nonce} in the pool of provider ${p.provider}`;
    const actions = el("td");
    if (p.state === "active") {
      actions.append(
        button("Undelegate…", `Undelegate ${which}`, async () => {
          const now = await position(p.provider, p.nonce);
          await act(session, await undelegate(session.context(), facts(now.p), BigInt(now.state.epoch)));
        }),
      );
    }
    if (p.state === "withdrawable") {
      actions.append(
        button("Withdraw…", `Withdraw ${which}`, async () => {
          const now = await position(p.provider, p.nonce);
          await act(session, await withdrawDelegation(session.context(), facts(now.p)));
        }),
      );
    }
    if (collectable(p, pool)) {
      actions.append(
        button("Collect…", `Collect the rewards of ${which}`, async () => {
          const now = await position(p.provider, p.nonce);
          const rewards = BigInt(now.p.rewards_to_collect ?? "0");
          await act(session, await collectRewards(session.context(), facts(now.p), rewards));
        }),
      );
    }
    const link = el("td");
    link.append(el("a", p.provider, { href: `/web/providers/${p.provider}` }));
    const row = el("tr", "", { "data-position": `${p.provider}/${p.nonce}`, "data-state": p.state });
    row.append(
      link,
      el("td", p.nonce, { class: "num" }),
      el("td", BigInt(p.shares).toLocaleString("en-US"), { class: "num" }),
      el("td", formatIo(BigInt(p.amount)), { class: "num value" }),
      el("td", stateText(p), { class: "state" }),
      el("td", p.rewards_to_collect === null ? "unknown (a reward index is missing)" : formatIo(BigInt(p.rewards_to_collect)), {
        class: "num rewards",
      }),
      actions,
    );
    rows.append(row);
  }
}

// The form's pool and amount, checked against the wallet and the pool before anything is built.
async function delegateFromForm(): Promise<void> {
  const ctx = session.context();
  const named = input("delegate_pool").trim();
  const amount = parseIo(input("delegate_amount"), "Delegate");
  const state = await readStake();
  const pool = (state.pools as Json[]).find((p) => p.provider === named || p.authority === named);
  if (!pool) {
    throw new Error(named ? `Pool: no open pool of provider ${named}: choose one from the list` : "Pool: choose one from the list");
  }
  const held = BigInt(session.state!.io);
  if (amount > held) throw new Error(`Delegate: ${formatIo(amount)} is more than your wallet holds (${formatIo(held)})`);
  if (BigInt(pool.delegated) === 0n && BigInt(pool.delegated_shares) > 0n) {
    throw new Error(`Pool: the pool of provider ${pool.provider} was slashed to nothing: it takes no new delegations`);
  }
  if (amount > BigInt(pool.room)) {
    throw new Error(
      `Delegate: at most ${formatIo(BigInt(pool.room))} more fits in this pool (its cap, 1x its supplier's own stake, is ${formatIo(BigInt(pool.cap))})`,
    );
  }
  // A new position takes the smallest nonce the wallet holds none at in this pool, as the CLI's does.
  const nonces = new Set((state.positions as Json[]).filter((p) => p.provider === pool.provider).map((p) => BigInt(p.nonce)));
  let nonce = 0n;
  while (nonces.has(nonce)) nonce += 1n;
  await act(session, await delegate(ctx, address(pool.provider), nonce, amount));
}

async function main(): Promise<void> {
  session = await start(async () => {
    const state = await readStake();
    showPools(state);
    showPositions(state);
  });
  setInterval(() => {
    if (session.connected) session.refresh().catch(() => undefined);
  }, REFRESH_MS);
  $("#delegate-button").onclick = guard(delegateFromForm);
}

main().catch((e) => say((e as Error).message, "error"));
