//! Protobuf to core for the fields many messages share: UUIDs, ids (interned),
//! task and library references, repeated fields, enums.

use uuid::Uuid;

use crate::wire::json::ProtoEnum;
use super::{echo, proto, FieldProblem, WireError};
use crate::core::event::LibraryRef;
use crate::core::ids::{EngineId, JobId, TaskRef};

/// Accepts the 36-character hyphenated form, in either case; the nil UUID is
/// accepted (it is a poor dedup key, but a valid one).
pub(super) fn uuid_from_text(text: &str) -> Result<[u8; 16], FieldProblem> {
    if text.len() != 36 {
        return Err(FieldProblem::BadUuid(format!(
            "{} has {} bytes",
            echo(text),
            text.len()
        )));
    }
    Uuid::parse_str(text)
        .map(|uuid| uuid.into_bytes())
        .map_err(|e| FieldProblem::BadUuid(format!("{}: {e}", echo(text))))
}

pub(super) fn job_id(field: &str, text: &str) -> Result<JobId, WireError> {
    interned(&JOB_IDS, text, JobId::new).map_err(|e| WireError::at(field, FieldProblem::BadId(e)))
}

pub(in crate::wire) fn engine_id(field: &str, text: &str) -> Result<EngineId, WireError> {
    interned(&ENGINE_IDS, text, EngineId::new).map_err(|e| WireError::at(field, FieldProblem::BadId(e)))
}

/// Most ids of one kind the decoder remembers; past it, it forgets them all and
/// starts again (a bound, not a cache policy: a grid has far fewer).
const INTERNED_IDS_MAX: usize = 65_536;

thread_local! {
    /// Ids already decoded on this thread, so every event about one engine or job
    /// shares one text: the fold then compares them by pointer and keeps one copy
    /// hot in cache, instead of chasing a fresh allocation per event. Equality is
    /// by value either way, so this changes no decision.
    static JOB_IDS: std::cell::RefCell<std::collections::HashMap<Box<str>, JobId>> = Default::default();
    static ENGINE_IDS: std::cell::RefCell<std::collections::HashMap<Box<str>, EngineId>> = Default::default();
}

fn interned<Id: Clone>(
    table: &'static std::thread::LocalKey<std::cell::RefCell<std::collections::HashMap<Box<str>, Id>>>,
    text: &str,
    make: impl Fn(&str) -> Result<Id, crate::core::ids::IdError>,
) -> Result<Id, crate::core::ids::IdError> {
    table.with(|table| {
        let mut table = table.borrow_mut();
        if let Some(id) = table.get(text) {
            return Ok(id.clone());
        }
        let id = make(text)?;
        if table.len() == INTERNED_IDS_MAX {
            table.clear();
        }
        table.insert(text.into(), id.clone());
        Ok(id)
    })
}

/// An absent `TaskRef` reads as an empty one, so the error names `task.job`.
pub(in crate::wire) fn task_ref(task: Option<proto::TaskRef>) -> Result<TaskRef, WireError> {
    task_ref_of(task.unwrap_or_default()).map_err(|e| e.within("task"))
}

pub(super) fn task_ref_of(task: proto::TaskRef) -> Result<TaskRef, WireError> {
    Ok(TaskRef::new(job_id("job", &task.job)?, task.index))
}

/// An absent `LibraryRef` reads as an empty one, so the error names
/// `<field>.name`. Names and versions are checked by `LibraryRef::validate`.
pub(in crate::wire) fn library_ref(
    field: &str,
    library: Option<proto::LibraryRef>,
) -> Result<LibraryRef, WireError> {
    let library = library.unwrap_or_default();
    library_ref_of(library).map_err(|e| e.within(field))
}

pub(super) fn library_ref_of(library: proto::LibraryRef) -> Result<LibraryRef, WireError> {
    let library = LibraryRef {
        name: library.name,
        version: library.version,
    };
    library.validate().map_err(|problem| {
        // `validate` checks the name, then the version: say which one is wrong.
        let part = if LibraryRef::new(&library.name, "v").validate().is_err() {
            "name"
        } else {
            "version"
        };
        WireError::at(part, FieldProblem::BadId(problem))
    })?;
    Ok(library)
}

/// Converts every item of a repeated field; an error names the item, `field[3]`.
pub(super) fn each<T, U>(
    field: &str,
    items: Vec<T>,
    convert: impl Fn(T) -> Result<U, WireError>,
) -> Result<Vec<U>, WireError> {
    items
        .into_iter()
        .enumerate()
        .map(|(item_idx, item)| convert(item).map_err(|e| e.within(&format!("{field}[{item_idx}]"))))
        .collect()
}

/// The proto enum value of `value`, refusing numbers this version does not know.
pub(super) fn known_enum<E: ProtoEnum>(field: &str, value: i32) -> Result<E, WireError> {
    E::try_from(value).map_err(|_| {
        WireError::at(
            field,
            FieldProblem::UnknownEnumValue {
                enum_name: E::NAME,
                value,
            },
        )
    })
}

/// The error for an enum left at `*_UNSPECIFIED`.
pub(super) fn unspecified<E: ProtoEnum>(field: &str) -> WireError {
    WireError::at(field, FieldProblem::Unspecified { enum_name: E::NAME })
}
