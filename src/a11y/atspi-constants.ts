// AT-SPI 2 constants the walker needs: D-Bus names, the role and state enums, and OSWorld's XML namespaces.
// The role and state tables follow the AT-SPI enum order (AtspiRole, AtspiStateType in at-spi2-core 2.46).

export const ATSPI_PREFIX = 'org.a11y.atspi.';
export const IFACE_ACCESSIBLE = 'org.a11y.atspi.Accessible';
export const IFACE_COMPONENT = 'org.a11y.atspi.Component';
export const IFACE_TEXT = 'org.a11y.atspi.Text';
export const IFACE_VALUE = 'org.a11y.atspi.Value';
export const IFACE_ACTION = 'org.a11y.atspi.Action';
export const IFACE_PROPERTIES = 'org.freedesktop.DBus.Properties';

export const REGISTRY_BUS_NAME = 'org.a11y.atspi.Registry';
export const ROOT_PATH = '/org/a11y/atspi/accessible/root';
export const NULL_PATH = '/org/a11y/atspi/null';

/** `Component.GetExtents` coordinate type: ATSPI_COORD_TYPE_SCREEN. */
export const COORD_TYPE_SCREEN = 0;

/**
 * Role names indexed by the `GetRole` number, spelled the way libatspi's `atspi_accessible_get_role_name`
 * spells them (enum nick with `-` turned into a space). Index 70 is ROLE_EXTENDED: the name then comes from
 * the toolkit's `GetRoleName`, as it does for any number past the end of this table.
 */
export const ROLE_NAMES: readonly string[] = [
  'invalid', 'accelerator label', 'alert', 'animation', 'arrow', 'calendar', 'canvas', 'check box',
  'check menu item', 'color chooser', 'column header', 'combo box', 'date editor', 'desktop icon',
  'desktop frame', 'dial', 'dialog', 'directory pane', 'drawing area', 'file chooser', 'filler',
  'focus traversable', 'font chooser', 'frame', 'glass pane', 'html container', 'icon', 'image',
  'internal frame', 'label', 'layered pane', 'list', 'list item', 'menu', 'menu bar', 'menu item',
  'option pane', 'page tab', 'page tab list', 'panel', 'password text', 'popup menu', 'progress bar',
  'push button', 'radio button', 'radio menu item', 'root pane', 'row header', 'scroll bar', 'scroll pane',
  'separator', 'slider', 'spin button', 'split pane', 'status bar', 'table', 'table cell',
  'table column header', 'table row header', 'tearoff menu item', 'terminal', 'text', 'toggle button',
  'tool bar', 'tool tip', 'tree', 'tree table', 'unknown', 'viewport', 'window', 'extended', 'header',
  'footer', 'paragraph', 'ruler', 'application', 'autocomplete', 'editbar', 'embedded', 'entry', 'chart',
  'caption', 'document frame', 'heading', 'page', 'section', 'redundant object', 'form', 'link',
  'input method window', 'table row', 'tree item', 'document spreadsheet', 'document presentation',
  'document text', 'document web', 'document email', 'comment', 'list box', 'grouping', 'image map',
  'notification', 'info bar', 'level bar', 'title bar', 'block quote', 'audio', 'video', 'definition',
  'article', 'landmark', 'log', 'marquee', 'math', 'rating', 'timer', 'static', 'math fraction', 'math root',
  'subscript', 'superscript', 'description list', 'description term', 'description value', 'footnote',
  'content deletion', 'content insertion', 'mark', 'suggestion', 'push button menu'
];
export const ROLE_EXTENDED = 70;

/**
 * State names indexed by bit number in the `GetState` bitfield (word * 32 + bit), written the way OSWorld
 * writes them: the `STATE_*` constant after its first underscore, lower-cased (so `multi_line`, `has_tooltip`).
 */
export const STATE_NAMES: readonly string[] = [
  'invalid', 'active', 'armed', 'busy', 'checked', 'collapsed', 'defunct', 'editable', 'enabled',
  'expandable', 'expanded', 'focusable', 'focused', 'has_tooltip', 'horizontal', 'iconified', 'modal',
  'multi_line', 'multiselectable', 'opaque', 'pressed', 'resizable', 'selectable', 'selected', 'sensitive',
  'showing', 'single_line', 'stale', 'transient', 'vertical', 'visible', 'manages_descendants',
  'indeterminate', 'required', 'truncated', 'animated', 'invalid_entry', 'supports_autocompletion',
  'selectable_text', 'is_default', 'visited', 'checkable', 'has_popup', 'read_only'
];

/** OSWorld's Ubuntu namespace map, in declaration order. Agents and metrics hard-code these URIs. */
export const OSWORLD_NS: ReadonlyArray<readonly [prefix: string, uri: string]> = [
  ['st', 'https://accessibility.ubuntu.example.org/ns/state'],
  ['attr', 'https://accessibility.ubuntu.example.org/ns/attributes'],
  ['cp', 'https://accessibility.ubuntu.example.org/ns/component'],
  ['doc', 'https://accessibility.ubuntu.example.org/ns/document'],
  ['docattr', 'https://accessibility.ubuntu.example.org/ns/document/attributes'],
  ['txt', 'https://accessibility.ubuntu.example.org/ns/text'],
  ['val', 'https://accessibility.ubuntu.example.org/ns/value'],
  ['act', 'https://accessibility.ubuntu.example.org/ns/action'],
];

/** OSWorld's guest limits (`MAX_DEPTH`, `MAX_WIDTH`). */
export const OSWORLD_MAX_DEPTH = 50;
export const OSWORLD_MAX_WIDTH = 1024;
