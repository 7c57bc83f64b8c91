//! Generates the protobuf types of `schemas/gridfold/v1/events.proto` into
//! `OUT_DIR`, for `src/wire/mod.rs` to include.
//!
//! - protoc comes from the `protoc-bin-vendored` crate, so a fresh clone builds
//!   with plain `cargo build` and nothing installed.
//! - Map fields are `BTreeMap`s, so encoding is deterministic (keys sorted).
//! - Every generated type derives serde, for the history file's JSON. Rather
//!   than list fields by hand, this script walks the schema's descriptors and
//!   attaches the JSON helpers of `src/wire/json.rs` to every enum-typed and
//!   bytes-typed field, so a field added later reads well in JSON without
//!   anyone remembering to say so. Shapes it has no helper for stop the build
//!   with a message saying what to do.
//! - It also writes `gridfold.v1.json.rs`: one `ProtoEnum` impl per enum.

use std::fmt::Write as _;
use std::path::PathBuf;

use prost_types::field_descriptor_proto::{Label, Type};
use prost_types::{DescriptorProto, EnumDescriptorProto, FieldDescriptorProto};

const SCHEMA_ROOT: &str = "schemas";
const PROTO_FILES: &[&str] = &["schemas/gridfold/v1/events.proto"];
/// The package the files above declare; its generated file is `<package>.rs`.
const PACKAGE: &str = "gridfold.v1";
/// Where `src/wire/mod.rs` includes the generated code.
const RUST_MODULE: &str = "crate::wire::proto";
const JSON_HELPERS: &str = "crate::wire::json";

/// Messages whose JSON is their single field alone, so a person writes
/// `{"dispatch": {...}}` for an `Order` and `[{"x": "1"}]` for a task list,
/// not `{"kind": {"dispatch": {...}}}`. Each must keep exactly one field: give
/// one a second field and the build stops (take it out of this list, and
/// rewrite the history files that use its short form).
const JSON_TRANSPARENT: &[&str] = &[
    ".gridfold.v1.Order",
    ".gridfold.v1.TaskParamsList",
    ".gridfold.v1.TaskParams",
];

/// Fields added after the first version of the schema that most events leave
/// at their zero: JSON leaves them out when they are (reading takes the zero
/// back), so a history export of an event that does not use them reads exactly
/// as it did before they existed, and a person's eye is not drawn to nothing.
const JSON_OMITTED_WHEN_ZERO: &[&str] = &[
    ".gridfold.v1.JobSubmitted.options",
    ".gridfold.v1.JobSubmitted.task_conditions",
    ".gridfold.v1.PolicySet.engine_tiers",
    ".gridfold.v1.PolicySet.greylist_affinity",
    ".gridfold.v1.PolicySet.redundancy",
    ".gridfold.v1.PolicySet.sge",
    ".gridfold.v1.PolicySet.techila",
    ".gridfold.v1.PolicySet.output",
    ".gridfold.v1.JobOptions.project_priority",
    ".gridfold.v1.JobOptions.expected_task_time_ms",
    ".gridfold.v1.TechilaPolicy.cycle_interval_ms",
    ".gridfold.v1.EngineProperties.libraries",
    ".gridfold.v1.RunTask.root_library",
    ".gridfold.v1.BlacklistsCleared.engine",
    ".gridfold.v1.Envelope.seal",
    ".gridfold.v1.Dispatch.epoch",
    ".gridfold.v1.TaskStarted.remote_job",
    ".gridfold.v1.EngineLost.epoch",
    ".gridfold.v1.EngineLoad.values_milli",
    ".gridfold.v1.LoadFormula.expression",
    ".gridfold.v1.PolicySet.queue_sort_method",
    ".gridfold.v1.JobOptions.soft",
    ".gridfold.v1.PolicySet.suspend_thresholds",
    ".gridfold.v1.JobOptions.span",
    ".gridfold.v1.RunTask.nodes",
    ".gridfold.v1.RunTask.companion",
    ".gridfold.v1.PolicySet.reservation",
    ".gridfold.v1.JobOptions.reserve",
    ".gridfold.v1.PolicySet.fbsng",
    ".gridfold.v1.JobOptions.process_type",
    ".gridfold.v1.JobOptions.companion_argv",
    ".gridfold.v1.RunTask.companion_argv",
    ".gridfold.v1.PolicySet.cigri",
    ".gridfold.v1.PolicySet.flood",
    ".gridfold.v1.PolicySet.caps",
    ".gridfold.v1.JobOptions.campaign",
    ".gridfold.v1.TaskCompleted.stdout_stored",
    ".gridfold.v1.TaskCompleted.stderr_stored",
    ".gridfold.v1.TaskFailed.stdout_stored",
    ".gridfold.v1.TaskFailed.stderr_stored",
    ".gridfold.v1.Delivery.engine",
    ".gridfold.v1.Delivery.seal",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={SCHEMA_ROOT}");

    let protoc = protoc_bin_vendored::protoc_bin_path()
        .expect("protoc-bin-vendored has no protoc for this platform");
    let protoc_include =
        protoc_bin_vendored::include_path().expect("protoc-bin-vendored has no include path");

    let mut config = prost_build::Config::new();
    config
        .protoc_executable(protoc)
        .protoc_arg(format!("--proto_path={}", protoc_include.display()))
        .btree_map(["."])
        .type_attribute(".", "#[derive(serde::Serialize, serde::Deserialize)]")
        // Oneofs are externally tagged enums: {"job_submitted": {...}}.
        .enum_attribute(".", "#[serde(rename_all = \"snake_case\")]");

    let descriptors = config
        .load_fds(PROTO_FILES, &[SCHEMA_ROOT])
        .unwrap_or_else(|e| panic!("protoc could not read the schema: {e}"));

    for wanted in JSON_OMITTED_WHEN_ZERO {
        let (message, field) = wanted.rsplit_once('.').expect("a field path has a dot");
        let found = descriptors.file.iter().any(|file| {
            file.message_type.iter().any(|m| {
                format!(".{}.{}", file.package(), m.name()) == message
                    && m.field.iter().any(|f| f.name() == field)
            })
        });
        assert!(found, "{wanted} (JSON_OMITTED_WHEN_ZERO in build.rs) is not a field of a top-level message");
    }

    let mut enum_impls =
        String::from("// @generated by build.rs: the names of every enum, for `wire::json`.\n");
    for file in &descriptors.file {
        assert_eq!(
            file.package(),
            PACKAGE,
            "{}: unexpected package",
            file.name()
        );
        let scope = format!(".{}", file.package());
        for message in &file.message_type {
            configure_message(&mut config, &mut enum_impls, &scope, &[], message);
        }
        for enumeration in &file.enum_type {
            write_enum_impl(&mut enum_impls, &[], enumeration);
        }
    }

    config
        .compile_fds(descriptors)
        .unwrap_or_else(|e| panic!("prost-build failed: {e}"));

    let out_dir = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out_dir.join(format!("{PACKAGE}.json.rs")), enum_impls)
        .expect("could not write the enum impls into OUT_DIR");
}

/// `outer` is the chain of enclosing message names (for nested types).
fn configure_message(
    config: &mut prost_build::Config,
    enum_impls: &mut String,
    scope: &str,
    outer: &[&str],
    message: &DescriptorProto,
) {
    let path = format!("{scope}.{}", message.name());
    if JSON_TRANSPARENT.contains(&path.as_str()) {
        assert_eq!(
            rust_field_count(message),
            1,
            "{path} is JSON-transparent (see JSON_TRANSPARENT in build.rs) and so must keep exactly one field"
        );
        config.message_attribute(&path, "#[serde(transparent)]");
    } else {
        // Hand-written JSON may omit fields (they take protobuf's zero), but a
        // misspelt field is an error, not silently nothing.
        config.message_attribute(&path, "#[serde(default, deny_unknown_fields)]");
    }

    for field in &message.field {
        configure_field(config, &path, message, field);
    }

    let mut inner_outer = outer.to_vec();
    inner_outer.push(message.name());
    for nested in &message.nested_type {
        let is_map_entry = nested.options.as_ref().is_some_and(|o| o.map_entry());
        if !is_map_entry {
            configure_message(config, enum_impls, &path, &inner_outer, nested);
        }
    }
    for enumeration in &message.enum_type {
        write_enum_impl(enum_impls, &inner_outer, enumeration);
    }
}

fn configure_field(
    config: &mut prost_build::Config,
    message_path: &str,
    message: &DescriptorProto,
    field: &FieldDescriptorProto,
) {
    let path = format!("{message_path}.{}", field.name());
    let optional = field.proto3_optional();
    let in_oneof = field.oneof_index.is_some() && !optional;
    let repeated = field.label() == Label::Repeated;
    let map_entry = (field.r#type() == Type::Message)
        .then(|| map_entry_of(message, field.type_name()))
        .flatten();

    if optional {
        config.field_attribute(&path, "#[serde(skip_serializing_if = \"Option::is_none\")]");
    } else if JSON_OMITTED_WHEN_ZERO.contains(&path.as_str()) {
        assert!(!in_oneof, "{path}: a oneof field cannot be omitted when zero");
        config.field_attribute(&path, format!("#[serde(skip_serializing_if = \"{JSON_HELPERS}::is_zero\")]"));
    }

    let helper = |kind: &str| -> &'static str {
        match (in_oneof, optional, repeated) {
            (false, false, false) => "",
            (false, true, false) => "::option",
            (false, false, true) if kind == "enum" => "::repeated",
            _ => panic!(
                "{path}: no JSON helper for a {kind} field in a oneof or repeated; \
                 add one to src/wire/json.rs and to build.rs"
            ),
        }
    };
    match field.r#type() {
        Type::Enum => {
            let rust_enum = rust_type_path(field.type_name());
            let module = format!("{JSON_HELPERS}::enum_name{}", helper("enum"));
            config.field_attribute(
                &path,
                format!(
                    "#[serde(serialize_with = \"{module}::serialize::<{rust_enum}, _>\", \
                     deserialize_with = \"{module}::deserialize::<{rust_enum}, _>\")]"
                ),
            );
        }
        Type::Bytes => {
            let module = format!("{JSON_HELPERS}::bytes_text{}", helper("bytes"));
            config.field_attribute(&path, format!("#[serde(with = \"{module}\")]"));
        }
        Type::Message => {
            if let Some(entry) = map_entry {
                let value = entry
                    .field
                    .iter()
                    .find(|f| f.number() == 2)
                    .expect("map value");
                if matches!(value.r#type(), Type::Enum | Type::Bytes) {
                    panic!(
                        "{path}: no JSON helper for a map of enums or bytes; \
                         add one to src/wire/json.rs and to build.rs"
                    );
                }
            }
        }
        _ => {}
    }
}

/// How many fields prost's struct for `message` has: one per field outside a
/// oneof, one per oneof (proto3 `optional` fields sit in synthetic oneofs that
/// are plain fields in Rust).
fn rust_field_count(message: &DescriptorProto) -> usize {
    let plain = message
        .field
        .iter()
        .filter(|f| f.oneof_index.is_none() || f.proto3_optional())
        .count();
    let real_oneofs = (0..message.oneof_decl.len())
        .filter(|&oneof_idx| {
            message
                .field
                .iter()
                .any(|f| f.oneof_index == Some(oneof_idx as i32) && !f.proto3_optional())
        })
        .count();
    plain + real_oneofs
}

/// The synthetic `XxxEntry` message protoc generates for a map field, if `type_name` is one.
fn map_entry_of<'a>(message: &'a DescriptorProto, type_name: &str) -> Option<&'a DescriptorProto> {
    let short = type_name.rsplit('.').next()?;
    message
        .nested_type
        .iter()
        .find(|n| n.name() == short && n.options.as_ref().is_some_and(|o| o.map_entry()))
}

/// `.gridfold.v1.Outer.Inner` → `crate::wire::proto::outer::Inner`, as prost names it.
fn rust_type_path(type_name: &str) -> String {
    let local = type_name
        .strip_prefix(&format!(".{PACKAGE}."))
        .unwrap_or_else(|| panic!("{type_name}: types from other packages are not supported"));
    let parts: Vec<&str> = local.split('.').collect();
    let (last, outer) = parts.split_last().expect("a type name has a last part");
    let mut path = String::from(RUST_MODULE);
    for part in outer {
        path.push_str("::");
        path.push_str(&snake_case(part));
    }
    path.push_str("::");
    path.push_str(last);
    path
}

fn write_enum_impl(out: &mut String, outer: &[&str], enumeration: &EnumDescriptorProto) {
    let name = enumeration.name();
    let prefix = format!("{}_", snake_case(name).to_uppercase());
    let mut json_names = Vec::new();
    for value in &enumeration.value {
        let short = value.name().strip_prefix(&prefix).unwrap_or_else(|| {
            panic!(
                "enum {name}: value {} must start with {prefix} (gridfold's style)",
                value.name()
            )
        });
        json_names.push(format!("{short:?}"));
    }
    assert!(
        enumeration
            .value
            .first()
            .is_some_and(|v| v.number() == 0 && v.name() == format!("{prefix}UNSPECIFIED")),
        "enum {name}: the first value must be {prefix}UNSPECIFIED = 0"
    );
    let rust_path: String = outer
        .iter()
        .map(|o| format!("{}::", snake_case(o)))
        .chain(std::iter::once(name.to_string()))
        .collect();
    writeln!(
        out,
        "impl {JSON_HELPERS}::ProtoEnum for {rust_path} {{\n    \
             const NAME: &'static str = {name:?};\n    \
             const VALUE_PREFIX: &'static str = {prefix:?};\n    \
             const JSON_NAMES: &'static [&'static str] = &[{}];\n    \
             fn proto_name(self) -> &'static str {{\n        self.as_str_name()\n    }}\n    \
             fn from_proto_name(name: &str) -> Option<Self> {{\n        Self::from_str_name(name)\n    }}\n\
         }}",
        json_names.join(", ")
    )
    .expect("writing to a String cannot fail");
}

/// `FailureKind` → `failure_kind`, as prost and protoc name things.
fn snake_case(camel: &str) -> String {
    let mut out = String::with_capacity(camel.len() + 4);
    let mut previous_lower_or_digit = false;
    for c in camel.chars() {
        if c.is_ascii_uppercase() {
            if previous_lower_or_digit {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower_or_digit = false;
        } else {
            out.push(c);
            previous_lower_or_digit = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    out
}
