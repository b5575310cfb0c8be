//! The `Remote` contract, the same code against every backend: the local
//! directory, moto and s3s-fs (real S3-compatible servers on 127.0.0.1).

use std::collections::BTreeMap;

use clawboard_sync::remote::{META_HASH, PutOutcome, list_all};
use clawboard_sync::{Body, Condition, Failure, Metadata, Remote};
use clawboard_tests::s3::{Bucket, Kind, runtime};
use rstest::rstest;

fn bytes(s: &[u8]) -> Body {
    Body::Bytes(s.to_vec().into())
}

fn meta(hash: &str) -> Metadata {
    BTreeMap::from([(META_HASH.to_owned(), hash.to_owned())])
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::moto(Kind::Moto)]
#[case::s3s(Kind::S3s)]
fn put_get_head_list_delete(#[case] kind: Kind) {
    let scratch = tempfile::tempdir().unwrap();
    let bucket = Bucket::new(kind, scratch.path());
    let r = bucket.remote();
    runtime().block_on(async {
        let out = r.put("tasks/t1/a.json", bytes(b"{}"), &meta("h1"), &Condition::None).await.unwrap();
        assert!(matches!(out, PutOutcome::Stored { .. }));
        let head = r.head("tasks/t1/a.json").await.unwrap().unwrap();
        assert_eq!((head.size, head.blake3()), (2, Some("h1")));
        let (body, info) = r.get("tasks/t1/a.json").await.unwrap().unwrap();
        assert_eq!((&body[..], info.blake3()), (&b"{}"[..], Some("h1")));
        assert!(r.head("tasks/t1/none").await.unwrap().is_none());
        assert!(r.get("tasks/t1/none").await.unwrap().is_none());

        // Empty objects and non-ASCII keys.
        r.put("gm/empty", bytes(b""), &meta("e"), &Condition::None).await.unwrap();
        assert_eq!(r.head("gm/empty").await.unwrap().unwrap().size, 0);
        r.put("gm/笔记 ü.md", bytes("内容".as_bytes()), &meta("u"), &Condition::None).await.unwrap();
        assert_eq!(&r.get("gm/笔记 ü.md").await.unwrap().unwrap().0[..], "内容".as_bytes());

        // Listing pages in key order, with start-after.
        for i in 0..5 {
            r.put(&format!("p/k{i}"), bytes(b"x"), &Metadata::new(), &Condition::None).await.unwrap();
        }
        let page = r.list("p/", None, 2).await.unwrap();
        let keys: Vec<_> = page.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["p/k0", "p/k1"]);
        assert_eq!(page.next.as_deref(), Some("p/k1"));
        let rest = r.list("p/", Some("p/k1"), 1000).await.unwrap();
        let keys: Vec<_> = rest.objects.iter().map(|o| o.key.as_str()).collect();
        assert_eq!(keys, ["p/k2", "p/k3", "p/k4"]);
        assert!(rest.next.is_none());
        assert_eq!(list_all(&r, "").await.unwrap().len(), 8);

        // Batch delete, and deleting what is not there.
        let failed = r.delete_many(&["p/k0".into(), "p/k1".into(), "p/missing".into()]).await.unwrap();
        assert!(failed.is_empty(), "{failed:?}");
        r.delete("p/k2").await.unwrap();
        r.delete("p/k2").await.unwrap();
        let left: Vec<_> = list_all(&r, "p/").await.unwrap().into_iter().map(|o| o.key).collect();
        assert_eq!(left, ["p/k3", "p/k4"]);
    });
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::moto(Kind::Moto)]
#[case::s3s(Kind::S3s)]
fn conditional_writes(#[case] kind: Kind) {
    let scratch = tempfile::tempdir().unwrap();
    let bucket = Bucket::new(kind, scratch.path());
    let r = bucket.remote();
    runtime().block_on(async {
        let first = r.put("_claims/t1", bytes(b"node-a"), &Metadata::new(), &Condition::Absent).await.unwrap();
        let PutOutcome::Stored { etag: Some(etag) } = first else { panic!("no etag: {first:?}") };
        let again = r.put("_claims/t1", bytes(b"node-b"), &Metadata::new(), &Condition::Absent).await.unwrap_err();
        assert_eq!(again.failure, Failure::PreconditionFailed, "{again}");
        let wrong = r
            .put(
                "_claims/t1",
                bytes(b"node-b"),
                &Metadata::new(),
                &Condition::Matches("0123456789abcdef0123456789abcdef".into()),
            )
            .await
            .unwrap_err();
        assert_eq!(wrong.failure, Failure::PreconditionFailed, "{wrong}");
        assert_eq!(&r.get("_claims/t1").await.unwrap().unwrap().0[..], b"node-a");
        r.put("_claims/t1", bytes(b"node-b"), &Metadata::new(), &Condition::Matches(etag.clone())).await.unwrap();
        assert_eq!(&r.get("_claims/t1").await.unwrap().unwrap().0[..], b"node-b");
        let stale =
            r.put("_claims/t1", bytes(b"node-c"), &Metadata::new(), &Condition::Matches(etag)).await.unwrap_err();
        assert_eq!(stale.failure, Failure::PreconditionFailed, "the old ETag no longer matches: {stale}");
    });
}

#[rstest]
#[case::dir(Kind::Dir)]
#[case::moto(Kind::Moto)]
#[case::s3s(Kind::S3s)]
fn large_files_go_in_parts_and_a_changed_file_is_never_completed(#[case] kind: Kind) {
    let scratch = tempfile::tempdir().unwrap();
    let bucket = Bucket::new(kind, scratch.path());
    let r = bucket.remote();
    let path = scratch.path().join("big.bin");
    // 20 MiB + 3 bytes: two full 8 MiB parts and a short last one.
    let data: Vec<u8> = (0..(20u32 << 20) + 3).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let hash = blake3::hash(&data).to_hex().to_string();
    runtime().block_on(async {
        let body = Body::File { path: path.clone(), size: data.len() as u64, blake3: hash.clone() };
        let out = r.put("tasks/t/big.bin", body, &meta(&hash), &Condition::None).await.unwrap();
        assert!(matches!(out, PutOutcome::Stored { .. }), "{out:?}");
        let head = r.head("tasks/t/big.bin").await.unwrap().unwrap();
        assert_eq!((head.size, head.blake3()), (data.len() as u64, Some(hash.as_str())));
        let (got, _) = r.get("tasks/t/big.bin").await.unwrap().unwrap();
        assert!(got[..] == data[..], "content differs");

        // The caller hashed one content, the file now holds another: not completed.
        let body = Body::File { path: path.clone(), size: data.len() as u64, blake3: "0".repeat(64) };
        let out = r.put("tasks/t/other.bin", body, &meta("stale"), &Condition::None).await.unwrap();
        assert_eq!(out, PutOutcome::BodyChanged);
        assert!(r.head("tasks/t/other.bin").await.unwrap().is_none(), "a changed upload left an object");
    });
}
