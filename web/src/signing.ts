// One wallet action end to end: the coordinator builds the transaction; the page checks it
// (check.ts) and shows what it does and costs, with gpunet's program ID; only when the person
// confirms is the wallet asked; the page checks the wallet's signature, then the coordinator relays
// it and waits for its confirmation. A refusal at any step says why and sends nothing.
import { getBase58Decoder, getBase64Decoder, getBase64Encoder } from "@solana/kit";
import type { Wallet, WalletAccount } from "@wallet-standard/base";
import {
  SolanaSignAndSendTransaction,
  type SolanaSignAndSendTransactionFeature,
  SolanaSignTransaction,
  type SolanaSignTransactionFeature,
} from "@solana/wallet-standard-features";

import type { Plan } from "./actions";
import { checkSigned, checkTransaction } from "./check";
import type { Idl } from "./idl";
import { $, formatIo, formatSol, hideMessage, say } from "./ui";

export interface Connected {
  wallet: Wallet;
  account: WalletAccount;
  chain: `${string}:${string}`;
}

export async function postJson(path: string, body: unknown): Promise<Record<string, unknown>> {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const answer = (await response.json().catch(() => ({}))) as Record<string, unknown>;
  if (!response.ok) throw new Error(String(answer.error ?? `${path} answered ${response.status}`));
  return answer;
}

// Shows the signing screen and resolves true when the person asks the wallet to sign, false on cancel.
function confirmOnScreen(plan: Plan, program: string, feeLamports: bigint): Promise<boolean> {
  const screen = $("#signing");
  $("#sign-title").textContent = plan.title;
  $("#sign-does").textContent = plan.does;
  $("#sign-amount-label").textContent = plan.amountLabel;
  $("#sign-amount").textContent = formatIo(plan.amount);
  $("#sign-fee").textContent = `${formatSol(feeLamports)} at most`;
  $("#sign-program").textContent = program;
  screen.hidden = false;
  const ok = $<HTMLButtonElement>("#sign-ok");
  const cancel = $<HTMLButtonElement>("#sign-cancel");
  ok.focus();
  return new Promise((resolve) => {
    const done = (answer: boolean) => {
      screen.hidden = true;
      ok.onclick = cancel.onclick = null;
      resolve(answer);
    };
    ok.onclick = () => done(true);
    cancel.onclick = () => done(false);
  });
}

async function signWithWallet(c: Connected, transaction: Uint8Array): Promise<{ signed?: Uint8Array; signature?: Uint8Array }> {
  const f = c.wallet.features;
  if (SolanaSignTransaction in f) {
    const feature = f[SolanaSignTransaction] as SolanaSignTransactionFeature[typeof SolanaSignTransaction];
    const [out] = await feature.signTransaction({ account: c.account, transaction, chain: c.chain });
    if (!out) throw new Error("the wallet returned no transaction");
    return { signed: out.signedTransaction };
  }
  // A wallet with only signAndSend sends it itself: the page cannot check its signature first.
  const feature = f[SolanaSignAndSendTransaction] as SolanaSignAndSendTransactionFeature[typeof SolanaSignAndSendTransaction];
  const [out] = await feature.signAndSendTransaction({ account: c.account, transaction, chain: c.chain });
  if (!out) throw new Error("the wallet returned no signature");
  return { signature: out.signature };
}

// Runs `plan`; answers the confirmed transaction's signature, or null when it was refused or
// cancelled (the message area says why).
export async function run(idl: Idl, c: Connected, program: string, plan: Plan): Promise<string | null> {
  hideMessage();
  try {
    const built = await postJson(`/web/api/tx/${plan.action}`, { wallet: c.account.address, ...plan.form });
    const bytes = new Uint8Array(getBase64Encoder().encode(String(built.transaction)));
    const checked = checkTransaction(idl, bytes, plan.expected); // throws Refused: the wallet is never asked
    if (!(await confirmOnScreen(plan, program, checked.feeLamports))) {
      say("Cancelled: nothing was signed.");
      return null;
    }
    const { signed, signature } = await signWithWallet(c, bytes);
    let answer;
    if (signed) {
      await checkSigned(idl, signed, plan.expected);
      answer = await postJson("/web/api/submit", { transaction: getBase64Decoder().decode(signed) });
    } else {
      answer = await postJson("/web/api/submit", { signature: getBase58Decoder().decode(signature!) });
    }
    say(`${plan.title}: confirmed, transaction ${String(answer.signature)}`, "ok");
    return String(answer.signature);
  } catch (e) {
    say((e as Error).message, "error");
    return null;
  }
}
