//! The 150 benchmark tools, named once: every flavour (aac-tools, rmcp's macros) and
//! every generated crate expands this one list, so the servers compared have the same tools.

/// The number of tools of every benchmark server.
pub const TOOL_COUNT: usize = 150;

/// What a benchmark tool does to data: tools `tool_NNN` with `NNN % 3` equal to 0 are
/// read-only, 1 write, 2 destructive (which take `confirm: true` under aac-tools).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `read_only`.
    Read,
    /// Neither read-only nor destructive.
    Write,
    /// `destructive`.
    Destructive,
}

impl Kind {
    /// The kind of tool number `index`.
    pub const fn of(index: usize) -> Kind {
        match index % 3 {
            0 => Kind::Read,
            1 => Kind::Write,
            _ => Kind::Destructive,
        }
    }
}

/// The name of tool number `index` (`tool_000` … `tool_149`).
pub fn tool_name(index: usize) -> String {
    format!("tool_{index:03}")
}

/// Calls `$callback!` with the 150 tool names, grouped by kind, after any extra tokens:
/// `$callback! { extra; read: [...], write: [...], destructive: [...] }`.
macro_rules! with_tools {
    ($callback:ident $(, $extra:tt)*) => {
        $callback! {
            $($extra)*;
            read: [
                tool_000, tool_003, tool_006, tool_009, tool_012, tool_015, tool_018, tool_021,
                tool_024, tool_027, tool_030, tool_033, tool_036, tool_039, tool_042, tool_045,
                tool_048, tool_051, tool_054, tool_057, tool_060, tool_063, tool_066, tool_069,
                tool_072, tool_075, tool_078, tool_081, tool_084, tool_087, tool_090, tool_093,
                tool_096, tool_099, tool_102, tool_105, tool_108, tool_111, tool_114, tool_117,
                tool_120, tool_123, tool_126, tool_129, tool_132, tool_135, tool_138, tool_141,
                tool_144, tool_147,
            ],
            write: [
                tool_001, tool_004, tool_007, tool_010, tool_013, tool_016, tool_019, tool_022,
                tool_025, tool_028, tool_031, tool_034, tool_037, tool_040, tool_043, tool_046,
                tool_049, tool_052, tool_055, tool_058, tool_061, tool_064, tool_067, tool_070,
                tool_073, tool_076, tool_079, tool_082, tool_085, tool_088, tool_091, tool_094,
                tool_097, tool_100, tool_103, tool_106, tool_109, tool_112, tool_115, tool_118,
                tool_121, tool_124, tool_127, tool_130, tool_133, tool_136, tool_139, tool_142,
                tool_145, tool_148,
            ],
            destructive: [
                tool_002, tool_005, tool_008, tool_011, tool_014, tool_017, tool_020, tool_023,
                tool_026, tool_029, tool_032, tool_035, tool_038, tool_041, tool_044, tool_047,
                tool_050, tool_053, tool_056, tool_059, tool_062, tool_065, tool_068, tool_071,
                tool_074, tool_077, tool_080, tool_083, tool_086, tool_089, tool_092, tool_095,
                tool_098, tool_101, tool_104, tool_107, tool_110, tool_113, tool_116, tool_119,
                tool_122, tool_125, tool_128, tool_131, tool_134, tool_137, tool_140, tool_143,
                tool_146, tool_149,
            ],
        }
    };
}
pub(crate) use with_tools;
