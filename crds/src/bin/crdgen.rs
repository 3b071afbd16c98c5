//! Writes the `TokenRouterDeployment` CRD: to the file given as the only
//! argument, else to stdout (`crdgen > crds/tokenrouterdeployment.yaml`).

fn main() -> std::process::ExitCode {
    let yaml = crds::crd_yaml();
    match std::env::args_os().nth(1) {
        Some(path) => match std::fs::write(&path, yaml) {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: cannot write {}: {e}", path.to_string_lossy());
                std::process::ExitCode::FAILURE
            }
        },
        None => {
            print!("{yaml}");
            std::process::ExitCode::SUCCESS
        }
    }
}
