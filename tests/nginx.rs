//! The deployment recipe behind nginx, tested with the real nginx from Debian on loopback:
//! over TCP and over a Unix socket, the client address and scheme nginx forwards reach the
//! app through `--forwarded-allow-ips`, and a client's forged `X-Forwarded-For` does not.
//! Skipped (`common::require`) where nginx is not installed; `.ci/run` installs it.

mod common;

use common::*;
use std::net::SocketAddr;
use std::os::fd::FromRawFd;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Nginx(Child);

impl Drop for Nginx {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn nginx_binary() -> Option<&'static str> {
    ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/bin/nginx"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
}

/// A TCP connection to `to` from the loopback address `from` (so nginx sees a client that
/// is not the trusted proxy address).
fn connect_from(from: &str, to: SocketAddr) -> Conn {
    let local: std::net::SocketAddrV4 = format!("{from}:0").parse().unwrap();
    let SocketAddr::V4(remote) = to else {
        panic!("IPv4 only");
    };
    let sa = |a: &std::net::SocketAddrV4| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(*a.ip()).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: plain socket calls on a descriptor created here and handed to a TcpStream.
    let stream = unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        assert!(fd >= 0);
        let l = sa(&local);
        let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        assert_eq!(
            libc::bind(fd, (&l as *const libc::sockaddr_in).cast(), len),
            0
        );
        let r = sa(&remote);
        assert_eq!(
            libc::connect(fd, (&r as *const libc::sockaddr_in).cast(), len),
            0
        );
        std::net::TcpStream::from_raw_fd(fd)
    };
    let mut c = Conn::from_stream(stream);
    c.set_io_timeout(Duration::from_secs(10));
    c
}

#[test]
fn behind_nginx_over_tcp_and_a_unix_socket() {
    let Some(nginx) = nginx_binary() else {
        require(false, "nginx (apt-get install nginx-light)");
        return;
    };
    let tmp = TempDir::new("nginx");
    let sock = tmp.file("m0.sock");
    let app_port = free_port();
    let s = Server::builder("echo:app")
        .without_port_flag()
        .args(&[
            "--bind",
            &format!("127.0.0.1:{app_port}"),
            "--bind",
            &format!("unix:{sock}"),
        ])
        .start();
    let front = free_port();
    let dir = tmp.file("");
    let conf = format!(
        r#"daemon off;
master_process off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log off;
    client_body_temp_path {dir}/body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{front};
        location /tcp/ {{
            proxy_pass http://127.0.0.1:{app_port}/;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto https;
        }}
        location /unix/ {{
            proxy_pass http://unix:{sock}:/;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto https;
        }}
    }}
}}
"#
    );
    let conf_path = tmp.file("nginx.conf");
    std::fs::write(&conf_path, conf).unwrap();
    let _nginx = Nginx(
        Command::new(nginx)
            .args(["-c", &conf_path, "-p", &dir])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx starts"),
    );
    let front_addr: SocketAddr = format!("127.0.0.1:{front}").parse().unwrap();
    assert!(
        wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(
            front_addr
        )
        .is_ok()),
        "nginx did not listen: {}",
        read_or_empty(format!("{dir}/error.log"))
    );
    for path in ["/tcp/", "/unix/"] {
        let mut c = connect_from("127.0.0.2", front_addr);
        // A forged address from the client: nginx appends the real one after it.
        c.send(
            format!(
                "GET {path}?via=nginx HTTP/1.1\r\nHost: example.test\r\n\
                 X-Forwarded-For: 6.6.6.6\r\nConnection: close\r\n\r\n"
            )
            .as_bytes(),
        );
        let r = c.read_response();
        assert_eq!(r.status, 200, "{path}: {}", r.status_line());
        let e = r.echo();
        assert_eq!(
            e.must("REMOTE_ADDR"),
            "127.0.0.2",
            "{path}: the forged address was believed"
        );
        assert_eq!(e.wsgi("url_scheme").as_str(), Some("https"), "{path}");
        assert_eq!(e.must("QUERY_STRING"), "via=nginx", "{path}");
        assert_eq!(e.must("HTTP_HOST"), "example.test", "{path}");
    }
    assert_served_by(&s);
}

fn assert_served_by(s: &Server) {
    let r = s.get("/direct");
    assert_eq!(r.status, 200);
}
