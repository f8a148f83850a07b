// The page's session: gpunet's program ID (shown in the footer of every page), the IDL, the discovered
// wallets and the connected one, and the wallet's state as the coordinator reads it from the chain.
import { type Address, address } from "@solana/kit";
import type { Wallet } from "@wallet-standard/base";

import type { Context, Plan } from "./actions";
import { connect, watchWallets } from "./discover";
import { IDL, type Idl } from "./idl";
import { type Connected, run } from "./signing";
import { $, clear, el, formatIo, formatSol, say } from "./ui";

export interface Session {
  idl: Idl;
  program: Address;
  connected: Connected | null;
  state: Record<string, any> | null; // /web/api/wallet/{wallet}
  context(): Context;
  refresh(): Promise<void>; // the wallet's state read again, and the page's part shown
}

// One of the coordinator's state answers (/web/api/...): its error said when it has one.
export async function stateOf(path: string): Promise<Record<string, any>> {
  const response = await fetch(path);
  const answer = await response.json();
  if (!response.ok) throw new Error(String(answer.error ?? response.status));
  return answer;
}

export const walletState = (wallet: string) => stateOf(`/web/api/wallet/${wallet}`);

// Runs the plan (signing.ts) and, once it is confirmed, shows the wallet's state again.
export async function act(session: Session, plan: Plan): Promise<void> {
  if (await run(session.idl, session.connected!, session.program, plan)) await session.refresh();
}

// Starts the session: lists the wallets as they register; `onConnected` runs after a connect, an
// account change and every refresh.
export async function start(onConnected: (s: Session) => Promise<void>): Promise<Session> {
  // The program is the bundled IDL's; a page that names another one is not this app's.
  const program = address(IDL.address);
  const idl = IDL;
  const named = $("[data-program]").textContent!.trim();
  if (named !== program) throw new Error(`This page names program ${named}, not gpunet's ${program}: nothing will be signed.`);
  const chain = ($("[data-app]").dataset.chain ?? "solana:localnet") as `${string}:${string}`;
  const session: Session = {
    idl,
    program,
    connected: null,
    state: null,
    context() {
      if (!this.connected || !this.state) throw new Error("connect a wallet first");
      return { program, wallet: address(this.connected.account.address), mint: address(this.state.io_mint) };
    },
    refresh: async () => undefined,
  };
  const refresh = async () => {
    if (!session.connected) return;
    session.state = await walletState(session.connected.account.address);
    $("#account").textContent = session.connected.account.address;
    $("#sol").textContent = formatSol(BigInt(session.state.sol_lamports));
    $("#io").textContent = formatIo(BigInt(session.state.io));
    $("#connected").hidden = false;
    await onConnected(session);
  };
  session.refresh = refresh;
  (window as any).gpunetRefresh = refresh;
  const list = $("#wallets");
  watchWallets((wallets: readonly Wallet[]) => {
    clear(list);
    if (!wallets.length) list.append(el("li", "No Solana wallet found: install Phantom, Solflare or Backpack, or any Wallet Standard wallet."));
    for (const wallet of wallets) {
      const button = el("button", `Connect ${wallet.name}`, { type: "button" }) as HTMLButtonElement;
      button.onclick = async () => {
        try {
          const account = await connect(wallet, async (changed) => {
            if (!changed) {
              session.connected = null;
              $("#connected").hidden = true;
              say(`${wallet.name} disconnected.`);
              return;
            }
            session.connected = { wallet, account: changed, chain };
            await refresh();
          });
          session.connected = { wallet, account, chain };
          await refresh();
        } catch (e) {
          say(`${wallet.name}: ${(e as Error).message}`, "error");
        }
      };
      const item = el("li");
      item.append(button);
      list.append(item);
    }
  });
  return session;
}
