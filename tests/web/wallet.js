// The browser tests' wallet: a Wallet Standard wallet, injected with page.add_init_script before the
// app's scripts run, that registers itself both ways the standard defines (the
// `wallet-standard:register-wallet` event, and an answer to the app's `wallet-standard:app-ready`),
// as Phantom, Solflare and Backpack do. It holds no key: every signature comes from the test process
// through the Playwright binding `gpunetWalletSign` (tests/web/testwallet.py), which signs with a real
// keypair and records each request. CONFIG ({address, publicKey, sendOnly}) is prepended by the test.
(() => {
  const chains = ["solana:localnet", "solana:devnet", "solana:mainnet"];
  const accountOf = (config) =>
    Object.freeze({
      address: config.address,
      publicKey: new Uint8Array(config.publicKey),
      chains,
      features: [CONFIG.sendOnly ? "solana:signAndSendTransaction" : "solana:signTransaction", "solana:signMessage"],
    });
  let account = accountOf(CONFIG);
  const listeners = new Set();
  let accounts = [];
  const sign = async (kind, bytes) => new Uint8Array(await window.gpunetWalletSign(kind, Array.from(bytes)));
  const wallet = {
    version: "1.0.0",
    name: "gpunet test wallet",
    icon: "data:image/svg+xml;base64,PHN2ZyB4bWxucz0iaHR0cDovL3d3dy53My5vcmcvMjAwMC9zdmciLz4=",
    chains,
    get accounts() {
      return accounts;
    },
    features: {
      "standard:connect": {
        version: "1.0.0",
        connect: async () => {
          accounts = [account];
          listeners.forEach((l) => l({ accounts }));
          return { accounts };
        },
      },
      "standard:events": {
        version: "1.0.0",
        on: (event, listener) => {
          if (event !== "change") return () => {};
          listeners.add(listener);
          return () => listeners.delete(listener);
        },
      },
      // Like a wallet that only signs and sends (CONFIG.sendOnly), or one that gives the app the signed transaction.
      ...(CONFIG.sendOnly
        ? {
            "solana:signAndSendTransaction": {
              version: "1.0.0",
              supportedTransactionVersions: ["legacy", 0],
              signAndSendTransaction: async (...inputs) =>
                Promise.all(inputs.map(async (i) => ({ signature: await sign("send", i.transaction) }))),
            },
          }
        : {
            "solana:signTransaction": {
              version: "1.0.0",
              supportedTransactionVersions: ["legacy", 0],
              signTransaction: async (...inputs) =>
                Promise.all(inputs.map(async (i) => ({ signedTransaction: await sign("transaction", i.transaction) }))),
            },
          }),
      "solana:signMessage": {
        version: "1.0.0",
        signMessage: async (...inputs) =>
          Promise.all(inputs.map(async (i) => ({ signedMessage: i.message, signature: await sign("message", i.message) }))),
      },
    },
  };
  // The person switches accounts in the wallet: it says so through standard:events.
  window.gpunetTestWalletSwitch = (config) => {
    account = accountOf(config);
    accounts = [account];
    listeners.forEach((l) => l({ accounts }));
  };
  const register = ({ register }) => register(wallet);
  window.dispatchEvent(new CustomEvent("wallet-standard:register-wallet", { detail: register }));
  window.addEventListener("wallet-standard:app-ready", ({ detail }) => register(detail));
})();
