//! `wardfs review`: serve the review web page on loopback (see [`crate::review`]).

use std::io::Write as _;
use std::net::Ipv4Addr;

use crate::cli::{ClientError, Ctx, Outcome};
use crate::review::{self, Token};

/// Serve a local web page to review staged commits, and push or discard them
///
/// Its timeline tab lists each zone's checkpoints with who changed what, compares any two, and
/// restores one. The page listens on 127.0.0.1 only and needs the random token in the URL this
/// command prints (a new one at every start). It talks to the running daemon, like the other
/// commands. Stop it with Ctrl-C.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The TCP port on 127.0.0.1 (default: a free one)
    #[arg(long, default_value_t = 0)]
    pub port: u16,
}

pub async fn run(ctx: &Ctx, a: &Args) -> Result<Outcome, ClientError> {
    let listener = tokio::net::TcpListener::bind((Ipv4Addr::LOCALHOST, a.port))
        .await
        .map_err(|e| ClientError::Local(format!("cannot listen on 127.0.0.1:{}: {e}", a.port)))?;
    let addr = listener
        .local_addr()
        .map_err(|e| ClientError::Local(e.to_string()))?;
    let token =
        Token::generate().map_err(|e| ClientError::Local(format!("cannot make a token: {e}")))?;
    let url = review::url(addr, &token);
    if ctx.json {
        println!("{}", serde_json::json!({ "url": url, "port": addr.port() }));
    } else {
        println!("{url}");
        eprintln!("wardfs review: open the URL above in a browser; Ctrl-C stops the page");
    }
    let _ = std::io::stdout().flush();
    review::serve(listener, ctx.client.clone(), token, stop_signal())
        .await
        .map_err(|e| ClientError::Local(format!("the review page failed: {e}")))?;
    Ok(Outcome::Ok)
}

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
