//! Pull requests through GitHub's REST API (octocrab), with a configurable base URI for GitHub
//! Enterprise or a test server. A pull request that already exists for the branch (422) is found
//! and reused. The token comes from the variable named by `git.token_env` and goes only to
//! `git.github_api`, over https (plain http only to a loopback API with `git.token_over_http`).
//! [`PrError`] says why a pull request could not be opened.

use super::error::{invalid, GitFailure, InvalidArg};
use crate::config::GitSection;
use crate::core::ErrorCode;
use crate::state::{StagedFileRow, StagedRow};

/// Why a pull request could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PrError {
    #[error(transparent)]
    Invalid(#[from] InvalidArg),
    /// GitHub could not be asked, or answered with an error.
    #[error("pull request: {0}")]
    Failed(String),
    /// No usable token, or GitHub refused it.
    #[error("pull request: GitHub refused the token: {0}")]
    Auth(String),
}

impl GitFailure for PrError {
    fn code(&self) -> ErrorCode {
        match self {
            PrError::Invalid(_) => ErrorCode::InvalidArgument,
            PrError::Failed(_) => ErrorCode::RemoteUnavailable,
            PrError::Auth(_) => ErrorCode::AuthFailed,
        }
    }
}

/// `owner` and `repo` from a remote URL (`https://github.com/o/r.git`, `git@github.com:o/r`): the
/// last two segments of its path.
pub fn owner_repo(url: &str) -> Result<(String, String), InvalidArg> {
    let path = match url.split_once("://") {
        Some((_, rest)) => rest.split_once('/').map(|(_, p)| p).unwrap_or(""),
        None => url.split_once(':').map(|(_, p)| p).unwrap_or(url),
    };
    let segs: Vec<&str> = path
        .trim_end_matches('/')
        .trim_end_matches(".git")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    match segs.as_slice() {
        [.., o, r] => Ok((o.to_string(), r.to_string())),
        _ => Err(invalid(
            "remote",
            format!("{url} does not name an owner/repository for a pull request"),
        )),
    }
}

/// The pull request's body: the message's body and a diffstat.
pub fn body(row: &StagedRow, files: &[StagedFileRow]) -> String {
    let mut out = String::new();
    if let Some((_, rest)) = row.message.split_once('\n') {
        let rest = rest.trim();
        if !rest.is_empty() {
            out.push_str(rest);
            out.push_str("\n\n");
        }
    }
    let (adds, dels): (u64, u64) = files
        .iter()
        .fold((0, 0), |(a, d), f| (a + f.additions, d + f.deletions));
    out.push_str(&format!(
        "{} files changed, {adds} insertions(+), {dels} deletions(-)\n\n",
        files.len()
    ));
    out.push_str("| file | change | + | - |\n|---|---|---|---|\n");
    for f in files {
        let kind = if f.binary {
            format!("{} (binary)", f.operation)
        } else if f.oversized {
            format!("{} (large)", f.operation)
        } else {
            f.operation.clone()
        };
        out.push_str(&format!(
            "| `{}` | {kind} | {} | {} |\n",
            f.path, f.additions, f.deletions
        ));
    }
    out.push_str("\nStaged and reviewed with wardfs.\n");
    out
}

/// Where a pull request goes, checked before anything is pushed.
pub struct Target {
    owner: String,
    repo: String,
    token: String,
}

impl Target {
    /// Checks that `url` names an owner/repository and that the token is set.
    pub fn new(settings: &GitSection, url: &str) -> Result<Target, PrError> {
        let (owner, repo) = owner_repo(url)?;
        let var = settings.token_env.as_deref().ok_or_else(|| {
            PrError::Auth("git.token_env names no variable holding a token".into())
        })?;
        let token = std::env::var(var)
            .ok()
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                PrError::Auth(format!(
                    "set ${var} (git.token_env) in the daemon's environment"
                ))
            })?;
        let api = crate::config::Endpoint::parse(&settings.github_api);
        let secure = api
            .as_ref()
            .is_some_and(|a| a.scheme == "https" || (a.is_loopback() && settings.token_over_http));
        if !secure {
            return Err(PrError::Auth(format!(
                "git.github_api ({}) is not https: the token in ${var} goes over plain http only to a loopback API, with git.token_over_http = true",
                api.map(|a| a.authority()).unwrap_or_default()
            )));
        }
        Ok(Target { owner, repo, token })
    }

    /// Opens (or finds) the pull request of `head` into the staged commit's branch; returns its
    /// URL.
    pub fn open(
        &self,
        settings: &GitSection,
        row: &StagedRow,
        head: &str,
        files: &[StagedFileRow],
    ) -> Result<String, PrError> {
        let (owner, repo) = (&self.owner, &self.repo);
        let title = row.message.lines().next().unwrap_or("wardfs change").trim();
        let body = body(row, files);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| PrError::Failed(format!("cannot start a runtime: {e}")))?;
        rt.block_on(async {
            let gh = octocrab::Octocrab::builder()
                .base_uri(settings.github_api.as_str())
                .map_err(|e| invalid("git.github_api", e.to_string()))?
                .personal_token(self.token.clone())
                .build()
                .map_err(|e| PrError::Failed(e.to_string()))?;
            let pulls = gh.pulls(owner, repo);
            match pulls
                .create(title, head, &row.branch)
                .body(body)
                .send()
                .await
            {
                Ok(pr) => Ok(pr
                    .html_url
                    .map(|u| u.to_string())
                    .unwrap_or_else(|| format!("{owner}/{repo}#{}", pr.number))),
                Err(octocrab::Error::GitHub { source, .. })
                    if source.status_code.as_u16() == 422 =>
                {
                    // Already exists: find it.
                    let list = pulls
                        .list()
                        .head(format!("{owner}:{head}"))
                        .state(octocrab::params::State::All)
                        .send()
                        .await
                        .map_err(gh_error)?;
                    list.items
                        .into_iter()
                        .next()
                        .and_then(|p| p.html_url.map(|u| u.to_string()))
                        .ok_or_else(|| {
                            PrError::Failed(format!(
                                "GitHub refused to create it ({}) and none exists for {head}",
                                source.message
                            ))
                        })
                }
                Err(e) => Err(gh_error(e)),
            }
        })
    }
}

fn gh_error(e: octocrab::Error) -> PrError {
    match e {
        octocrab::Error::GitHub { source, .. }
            if matches!(source.status_code.as_u16(), 401 | 403) =>
        {
            PrError::Auth(source.message)
        }
        octocrab::Error::GitHub { source, .. } => PrError::Failed(format!(
            "GitHub answered {}: {}",
            source.status_code, source.message
        )),
        other => PrError::Failed(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::owner_repo;

    #[test]
    fn owners_and_repos_from_urls() {
        assert_eq!(
            owner_repo("https://github.com/o/r.git").unwrap(),
            ("o".into(), "r".into())
        );
        assert_eq!(
            owner_repo("git@github.com:o/r").unwrap(),
            ("o".into(), "r".into())
        );
        assert_eq!(
            owner_repo("git://127.0.0.1:9418/o/r.git").unwrap(),
            ("o".into(), "r".into())
        );
        assert!(owner_repo("git://127.0.0.1:9418/r.git").is_err());
    }
}
