// Wallets, through the Wallet Standard: getWallets() answers the wallets registered so far and hears
// later ones (it dispatches `wallet-standard:app-ready` and listens for `wallet-standard:register-wallet`,
// the handshake Phantom, Solflare and Backpack use). A wallet is usable here when it connects
// (standard:connect) and signs Solana transactions (solana:signTransaction, or only
// solana:signAndSendTransaction) and messages (solana:signMessage, for jobs and signed requests).
import { getWallets } from "@wallet-standard/app";
import type { Wallet, WalletAccount } from "@wallet-standard/base";
import {
  StandardConnect,
  type StandardConnectFeature,
  StandardEvents,
  type StandardEventsFeature,
} from "@wallet-standard/features";
import { SolanaSignMessage, SolanaSignAndSendTransaction, SolanaSignTransaction } from "@solana/wallet-standard-features";

export function usable(wallet: Wallet): boolean {
  const f = wallet.features;
  return (
    StandardConnect in f &&
    SolanaSignMessage in f &&
    (SolanaSignTransaction in f || SolanaSignAndSendTransaction in f) &&
    wallet.chains.some((c) => c.startsWith("solana:"))
  );
}

// Calls `changed` with the usable wallets now and whenever one registers or unregisters.
export function watchWallets(changed: (wallets: readonly Wallet[]) => void): void {
  const registry = getWallets();
  const update = () => changed(registry.get().filter(usable));
  registry.on("register", update);
  registry.on("unregister", update);
  update();
}

// Connects and answers the wallet's first account; `accountChanged` hears the account the wallet
// switches to later (standard:events), or null when it disconnects.
export async function connect(
  wallet: Wallet,
  accountChanged: (account: WalletAccount | null) => void,
): Promise<WalletAccount> {
  const { accounts } = await (wallet.features[StandardConnect] as StandardConnectFeature[typeof StandardConnect]).connect();
  const account = accounts[0] ?? wallet.accounts[0];
  if (!account) throw new Error(`${wallet.name} connected no account`);
  const events = wallet.features[StandardEvents] as StandardEventsFeature[typeof StandardEvents] | undefined;
  events?.on("change", (properties) => {
    if (properties.accounts) accountChanged(properties.accounts[0] ?? null);
  });
  return account;
}
