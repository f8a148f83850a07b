// gpunet's wallet module: finds Wallet Standard wallets, checks each transaction before the wallet is
// asked to sign it, and signs gpunet's requests. Built by scripts/setup into
// coordinator/web/static/wallet.js. Each page runs its own part ([data-app]).
import { getWallets } from "@wallet-standard/app";

export function walletNames(): string[] {
  return getWallets().get().map((w) => w.name);
}

const app = document.querySelector<HTMLElement>("[data-app]")?.dataset.app;
if (app === "client") void import("./client");
if (app === "supplier") void import("./supplier");
if (app === "stake") void import("./stake");
