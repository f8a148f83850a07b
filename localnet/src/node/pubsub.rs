//! PubSub over WebSocket: account, program, logs, signature and slot subscriptions,
//! with Agave's notification shapes and integer subscription ids.

use {
    super::{
        chain::{Commitment, Event, TxEvent},
        encoding::{encode_notification_account, AccountOpts, Encoding},
        errors::{error_response, RpcError, RpcResult},
        methods::accounts::{matches, parse_filters, Filter},
        params::{Config, Params},
        record::err_json,
        Node,
    },
    axum::{
        extract::{
            ws::{Message, WebSocket, WebSocketUpgrade},
            State,
        },
        response::Response,
        routing::any,
        Router,
    },
    serde_json::{json, Value},
    solana_pubkey::Pubkey,
    solana_signature::Signature,
    std::{
        collections::HashMap,
        str::FromStr,
        sync::{
            atomic::{AtomicU64, Ordering},
            Arc,
        },
    },
    tokio::sync::broadcast::error::RecvError,
};

/// Largest WebSocket message accepted from a client.
pub const MAX_MESSAGE_SIZE: usize = 1 << 20;

static NEXT_ID: AtomicU64 = AtomicU64::new(0);

enum Sub {
    Account(Pubkey, AccountOpts),
    Program(Pubkey, AccountOpts, Vec<Filter>),
    /// None: every transaction; Some(key): transactions mentioning key.
    Logs(Option<Pubkey>),
    /// Notified once the transaction reaches the commitment asked for.
    Signature(Signature, Commitment),
    Slot,
}

pub fn router(node: Arc<Node>) -> Router {
    Router::new().route("/", any(upgrade)).with_state(node)
}

async fn upgrade(State(node): State<Arc<Node>>, ws: WebSocketUpgrade) -> Response {
    ws.max_message_size(MAX_MESSAGE_SIZE)
        .max_frame_size(MAX_MESSAGE_SIZE)
        .on_upgrade(move |socket| session(node, socket))
}

fn notification(method: &str, sub: u64, result: Value) -> Message {
    let v = json!({ "jsonrpc": "2.0", "method": method, "params": { "result": result, "subscription": sub } });
    Message::Text(v.to_string().into())
}

fn ctx(slot: u64, value: Value) -> Value {
    json!({ "context": { "slot": slot }, "value": value })
}

fn parse_key(s: Option<String>) -> RpcResult<Pubkey> {
    s.and_then(|s| Pubkey::from_str(&s).ok())
        .ok_or_else(|| RpcError::invalid_params("Invalid Request: Invalid pubkey provided"))
}

async fn session(node: Arc<Node>, mut socket: WebSocket) {
    let mut events = node.chain().events.subscribe();
    let mut subs: HashMap<u64, Sub> = HashMap::new();
    loop {
        let out: Vec<Message> = tokio::select! {
            msg = socket.recv() => match msg {
                Some(Ok(Message::Text(text))) => handle_request(&node, &mut subs, text.as_bytes()),
                Some(Ok(Message::Binary(bytes))) => handle_request(&node, &mut subs, &bytes),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => vec![],
                Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return,
            },
            ev = events.recv() => match ev {
                Ok(ev) => notify(&node, &mut subs, &ev),
                Err(RecvError::Lagged(_)) => vec![],
                Err(RecvError::Closed) => return,
            },
        };
        for m in out {
            if socket.send(m).await.is_err() {
                return;
            }
        }
    }
}

fn handle_request(node: &Node, subs: &mut HashMap<u64, Sub>, body: &[u8]) -> Vec<Message> {
    let text = |v: Value| Message::Text(v.to_string().into());
    let req: Value = match serde_json::from_slice(body) {
        Ok(v) => v,
        Err(_) => return vec![text(error_response(Value::Null, &RpcError::parse_error()))],
    };
    let id = req.get("id").cloned().unwrap_or(Value::Null);
    let Some(method) = req.get("method").and_then(Value::as_str).filter(|_| req.get("jsonrpc") == Some(&json!("2.0")))
    else {
        return vec![text(error_response(id, &RpcError::invalid_request()))];
    };
    let mut extra = vec![];
    let result = Params::new(req.get("params").cloned()).and_then(|p| subscribe(node, subs, method, &p, &mut extra));
    let mut out = vec![match result {
        Ok(v) => text(json!({ "jsonrpc": "2.0", "result": v, "id": id })),
        Err(e) => text(error_response(id, &e)),
    }];
    out.extend(extra);
    out
}

fn account_opts(cfg: &Config) -> RpcResult<AccountOpts> {
    AccountOpts::from_config(cfg, Encoding::Binary)
}

fn subscribe(
    node: &Node,
    subs: &mut HashMap<u64, Sub>,
    method: &str,
    p: &Params,
    extra: &mut Vec<Message>,
) -> RpcResult<Value> {
    let sub = match method {
        "accountSubscribe" => Sub::Account(parse_key(p.opt(0)?)?, account_opts(&p.config(1)?)?),
        "programSubscribe" => {
            let cfg = p.config(1)?;
            Sub::Program(parse_key(p.opt(0)?)?, account_opts(&cfg)?, parse_filters(&cfg)?)
        }
        "logsSubscribe" => {
            p.require(1)?;
            match p.raw(0) {
                Some(Value::String(s)) if s == "all" || s == "allWithVotes" => Sub::Logs(None),
                Some(Value::Object(m)) => match m.get("mentions").and_then(Value::as_array) {
                    Some(list) if list.len() == 1 => Sub::Logs(Some(parse_key(list[0].as_str().map(String::from))?)),
                    _ => return Err(RpcError::invalid_params("Invalid Request: Only 1 address supported")),
                },
                _ => {
                    return Err(RpcError::invalid_params_serde(
                        "unknown variant, expected `all`, `allWithVotes` or `mentions`",
                    ))
                }
            }
        }
        "signatureSubscribe" => {
            let s: String = p.req(0)?;
            let sig = Signature::from_str(&s)
                .map_err(|_| RpcError::invalid_params("Invalid Request: Invalid signature provided"))?;
            let cfg = p.config(1)?;
            cfg.check(node.chain().slot)?;
            Sub::Signature(sig, Commitment::parse(cfg.get::<String>("commitment")?.as_deref()))
        }
        "slotSubscribe" => Sub::Slot,
        m if m.ends_with("Unsubscribe") => {
            let id: u64 = p.req(0)?;
            return match subs.remove(&id) {
                Some(_) => Ok(json!(true)),
                None => Err(RpcError::invalid_params("Invalid subscription id.")),
            };
        }
        _ => return Err(RpcError::method_not_found()),
    };
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    if let Sub::Signature(sig, wanted) = &sub {
        // Already there: notify at once.
        let chain = node.chain();
        if let Some(rec) = chain.transaction(sig).filter(|r| chain.commitment_of(r.slot) >= *wanted) {
            extra.push(notification("signatureNotification", id, ctx(rec.slot, json!({ "err": err_json(&rec.err) }))));
            return Ok(json!(id));
        }
    }
    subs.insert(id, sub);
    Ok(json!(id))
}

fn notify(node: &Node, subs: &mut HashMap<u64, Sub>, ev: &Event) -> Vec<Message> {
    let mut out = vec![];
    match ev {
        Event::Slot { slot, parent } => {
            let mut done = vec![];
            for (id, sub) in subs.iter() {
                match sub {
                    Sub::Slot => out.push(notification(
                        "slotNotification",
                        *id,
                        json!({ "parent": parent, "root": slot, "slot": slot }),
                    )),
                    // A transaction processed earlier may reach the commitment asked for with this slot.
                    Sub::Signature(sig, wanted) => {
                        let chain = node.chain();
                        if let Some(rec) = chain.transaction(sig).filter(|r| chain.commitment_of(r.slot) >= *wanted) {
                            let value = json!({ "err": err_json(&rec.err) });
                            out.push(notification("signatureNotification", *id, ctx(rec.slot, value)));
                            done.push(*id);
                        }
                    }
                    _ => {}
                }
            }
            for id in done {
                subs.remove(&id);
            }
        }
        Event::Tx(tx) => {
            let mut done = vec![];
            for (id, sub) in subs.iter() {
                notify_tx(node, *id, sub, tx, &mut out, &mut done);
            }
            for id in done {
                subs.remove(&id);
            }
        }
    }
    out
}

fn notify_tx(node: &Node, id: u64, sub: &Sub, tx: &TxEvent, out: &mut Vec<Message>, done: &mut Vec<u64>) {
    let decimals = |m: &Pubkey| node.chain().mint_decimals(m);
    match sub {
        Sub::Account(key, opts) => {
            for (_, acc) in tx.written.iter().filter(|(k, _)| k == key) {
                let v = encode_notification_account(&decimals, acc, opts);
                out.push(notification("accountNotification", id, ctx(tx.slot, v)));
            }
        }
        Sub::Program(program, opts, filters) => {
            for (k, acc) in tx.written.iter().filter(|(_, a)| a.owner == *program && matches(filters, &a.data)) {
                let v = encode_notification_account(&decimals, acc, opts);
                let value = json!({ "pubkey": k.to_string(), "account": v });
                out.push(notification("programNotification", id, ctx(tx.slot, value)));
            }
        }
        Sub::Logs(filter) => {
            if filter.is_none_or(|k| tx.keys.contains(&k)) {
                let value = json!({ "signature": tx.signature, "err": err_json(&tx.err), "logs": tx.logs });
                out.push(notification("logsNotification", id, ctx(tx.slot, value)));
            }
        }
        Sub::Signature(sig, wanted) => {
            if sig.to_string() == tx.signature && node.chain().commitment_of(tx.slot) >= *wanted {
                out.push(notification("signatureNotification", id, ctx(tx.slot, json!({ "err": err_json(&tx.err) }))));
                done.push(id);
            }
        }
        Sub::Slot => {}
    }
}
